// Method: an executable instance of one method of a Program.
//
// It owns its value table and its planned activation arena (one allocation, sized at export
// by the memory planner and bounded by memory_limit()). Inputs are bound by pointer (no copy)
// and must stay alive and unchanged until execute() returns; each execute() needs them bound
// again (no pointer is kept from one execution to the next). Outputs are views into the
// arena, the state, the constants or an input, valid until the next execute() (and, for a
// view of an input, while that input's memory lives). A Method is not thread-safe: use one
// per thread, or serialize calls. Its state values point into the ProgramState it was loaded
// with (or the program's default state); Methods bound to different states may run at the same
// time (see state.h).
//
// Loading proves, besides every index and size, that each instruction reads only values that
// are constants, state, method inputs or outputs of an earlier instruction, that no kernel
// writes an arena slice overlapping one it reads, and that every tensor is aligned for its
// dtype; a file that breaks any of these is refused with kInvalidProgram.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/runtime/backend.h"
#include "ember/runtime/evalue.h"
#include "ember/runtime/kernel.h"
#include "ember/runtime/state.h"
#include "ember/runtime/thread_pool.h"

namespace ember {

class Program;

// What a method input accepts: dtype, rank and per-dim upper bounds (exact when static).
struct TensorSpec {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;   // upper bounds
  std::vector<bool> dynamic;    // true: any size in [0, sizes[d]]
};

struct InstructionInfo {
  std::string kind;             // "kernel", "delegate" or "copy"
  std::string name;             // op name or backend id
};

class Method {
 public:
  ~Method();
  Method(const Method&) = delete;
  Method& operator=(const Method&) = delete;

  const std::string& name() const { return name_; }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  const TensorSpec& input_spec(size_t i) const { return input_specs_[i]; }
  // Declared dtype and upper-bound sizes of output `i` (empty sizes for a non-tensor output).
  const TensorSpec& output_spec(size_t i) const { return output_specs_[i]; }

  // Binds input `i` to caller memory after checking dtype, rank, sizes against the spec and
  // that `t.data` is aligned for the dtype.
  Error set_input(size_t i, const Tensor& t);
  // Runs all instructions. Fails with the op name and instruction index if a kernel fails,
  // or if an input was not bound.
  Error execute();
  // Executes each of `methods` once, in lockstep: instances of one method of one Program, each
  // with its own state and its inputs bound as for execute(). A delegate call whose backend
  // allows it (Backend::max_stacked_rows) runs once over the rows of every method, so the
  // weights it reads are read once for the batch rather than once per method; the instructions
  // between such calls run per method, one thread-pool task per method. Each method's outputs
  // are the ones its own execute() would give, bit for bit. errors[i] (n entries, caller-owned)
  // receives method i's result: a method that fails stops there and the others go on; one of
  // another program or method than methods[0], or given twice, fails with kInvalidArgument. The
  // caller must own every method for the call (none may run elsewhere meanwhile).
  static void execute_batch(Method* const* methods, size_t n, Error* errors);
  const EValue& output(size_t i) const { return *outputs_[i]; }

  size_t arena_size() const { return arena_size_; }
  size_t num_instructions() const;
  InstructionInfo instruction_info(size_t i) const;

 private:
  friend class Program;
  Method();
  struct Instr;
  struct DelegateInstance;
  struct Lookahead;
  Error load(std::shared_ptr<Program> program, uint32_t index, std::shared_ptr<ProgramState> session_state);
  // Walks the instructions in order (method_verify.cpp): every tensor read must be produced
  // before it is read, and no kernel may write arena bytes it also reads. `storage` holds the
  // fb::Storage of each tensor value and -1 for other values.
  Error verify_dataflow(const std::vector<int8_t>& storage) const;
  // execute() in parts, for execute_batch(): the input checks and per-execution resets, then
  // instruction k with the instruction's index and op in any error.
  Error begin_execution();
  Error run_instruction(size_t k, KernelContext& ctx);
  // Instruction k (a stackable delegate call) for `methods`: runs of them whose rows fit the
  // backend's max_stacked_rows share one call over their rows stacked, the rest run alone
  // (method_batch.cpp). errors[j] receives method j's result.
  static void run_stacked(size_t k, Method* const* methods, size_t n, Error* errors);
  // One delegate call over the rows of `methods` (Backend::execute_stacked).
  static void stack_call(size_t k, Method* const* methods, size_t n, Error* errors);
  // A batch's per-method instructions from k to the next stacked call: segment(j0, j1) runs
  // methods [j0, j1) through them, as one pool task per method (uneven: taken one at a time by
  // whichever thread is free, else a contiguous share per thread) or, when the segment's work was
  // small the last time (lead's segment_work_), on the calling thread alone.
  template <typename F>
  static void run_segment(Method* lead, size_t k, int64_t n, bool uneven, F& segment);

  std::shared_ptr<Program> program_;
  std::shared_ptr<ProgramState> state_;              // null: the program's default state
  std::string name_;
  std::vector<EValue> values_;
  std::vector<std::vector<EValue*>> lists_;         // storage for list items
  std::vector<EValue*> arg_storage_;                // instruction arguments, flat
  std::vector<EValue*> inputs_;
  std::vector<bool> input_bound_;
  std::vector<TensorSpec> input_specs_;
  std::vector<EValue*> outputs_;
  std::vector<TensorSpec> output_specs_;
  std::vector<Instr> instrs_;
  std::vector<std::string> op_names_;
  std::vector<DelegateInstance> delegates_;
  // execute_batch: seconds of work (on one thread) that the segment starting at instruction k
  // took the last time this method led a batch.
  std::vector<float> segment_work_;
  uint8_t* arena_ = nullptr;
  size_t arena_size_ = 0;
  // EMBER_PROFILE=1: seconds and calls per instruction, printed to stderr when the method is destroyed.
  bool profile_ = false;
  std::vector<double> profile_seconds_;
  std::vector<uint64_t> profile_calls_;
  PoolProfile profile_pool_;       // this method's share of the pool's synchronization totals
  uint64_t profile_executions_ = 0;
  double profile_wall_s_ = 0;      // wall seconds of its executions (batched steps whole)
  // Batched steps this method took part in (execute_batch): their count, the methods in them
  // (summed), and their wall seconds in all, in stacked delegate calls, and in the per-method
  // stretches between them. There a stacked call's seconds are shared equally by its methods in
  // profile_seconds_, and a per-method instruction counts the time it took on whichever thread ran it.
  struct BatchProfile {
    uint64_t steps = 0, methods = 0;
    double step_s = 0, stacked_s = 0, segment_s = 0;
  };
  BatchProfile profile_batch_;
  void print_profile() const;
};

}  // namespace ember
