// Sampler: the one place where next-token choice happens.
//
// The chain, in order (the order of Hugging Face `generate`):
//   1. penalties over the `penalty_window` most recent context tokens (prompt + generated):
//      repetition (HF/CTRL style: a positive logit is divided by it, a negative one multiplied),
//      frequency (logit -= frequency_penalty * count) and presence (logit -= presence_penalty
//      once the token occurred);
//   2. temperature 0 => greedy (argmax, ties to the lowest id); stop here;
//   3. logits / temperature, softmax;
//   4. top-k (keep the k most likely; 0 = off);
//   5. top-p (keep the smallest most-likely set whose probability reaches top_p; 1 = off);
//   6. min-p (drop tokens whose probability is below min_p * the top probability; 0 = off);
//   7. a seeded draw from the renormalized survivors (std::mt19937_64; same seed => same tokens).
//
// A Sampler owns scratch buffers sized to the vocabulary once; `sample` does no allocation.
// Not thread-safe: one Sampler per generation thread.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ember/runtime/error.h"

namespace ember {
namespace runners {

struct SamplerConfig {
  float temperature = 0.0f;          // >= 0; 0 = greedy
  int32_t top_k = 0;                 // >= 0; 0 = off
  float top_p = 1.0f;                // in (0, 1]; 1 = off
  float min_p = 0.0f;                // in [0, 1); 0 = off
  float repetition_penalty = 1.0f;   // > 0; 1 = off
  float frequency_penalty = 0.0f;    // any finite value; 0 = off
  float presence_penalty = 0.0f;     // any finite value; 0 = off
  int32_t penalty_window = 64;       // >= 0 recent tokens the penalties look at; 0 = the whole context
  uint64_t seed = 0;

  // 0, and temperatures below the smallest normal float (1 / T would overflow to inf), are greedy.
  bool greedy() const { return temperature < std::numeric_limits<float>::min(); }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
  // kInvalidArgument naming the field and value when a setting is out of range.
  Error validate() const;
};

class Sampler {
 public:
  // `vocab_size` > 0: the length of every logits row this sampler will see. Allocates
  // kBytesPerToken * vocab_size bytes: callers sizing it from a file check that first
  // (ember::check_memory), as TextRunner::create does.
  explicit Sampler(int64_t vocab_size);

  // Bytes of buffers per vocabulary entry: scratch logits, penalty counts, candidates.
  static constexpr uint64_t kBytesPerToken = sizeof(float) + sizeof(int32_t) + 8;

  // Validates and installs `config`; reseeds the generator with config.seed.
  Error configure(const SamplerConfig& config);
  const SamplerConfig& config() const { return config_; }
  // Reseeds the generator only (keeps the rest of the configuration).
  void reseed(uint64_t seed);

  // Chooses the next token. `logits`: float32[vocab_size], not modified (penalties work on a
  // scratch copy). `history`: the context token ids, oldest first (only the last
  // penalty_window are read; ids outside the vocabulary are ignored). Returns the token id.
  // Fails (kInvalidArgument) only if every logit is NaN/-inf.
  Result<int64_t> sample(const float* logits, const int64_t* history, size_t history_len);

  // The distribution the draw in `sample` would use: probs[vocab_size], 0 for filtered tokens,
  // one-hot for greedy. Does not advance the generator. For tests and debugging.
  Error probabilities(const float* logits, const int64_t* history, size_t history_len,
                      std::vector<float>* probs);

  int64_t vocab_size() const { return vocab_; }

 private:
  struct Candidate {
    float value;   // logit, then probability
    int32_t id;
  };
  // Runs steps 1-6; leaves the survivors in cands_[0, n_kept_) with unnormalized weights
  // summing to kept_sum_, or sets greedy_id_ >= 0 for a greedy pick.
  Error run_chain(const float* logits, const int64_t* history, size_t history_len);
  const float* apply_penalties(const float* logits, const int64_t* history, size_t history_len);
  // Moves the heaviest of cands_[0, n) to the front, at least `need` of them (by_mass: at least
  // `need` of their summed weight) and all those as heavy as the lightest moved; returns how many.
  // Top-k and top-p then only order those (the same survivors as ordering all n).
  size_t heaviest_first(size_t n, double need, bool by_mass);

  int64_t vocab_;
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;       // [vocab] penalized logits
  std::vector<float> weights_;       // [vocab] exp((x - max) / T)
  std::vector<int32_t> counts_;      // [vocab] zero between calls
  std::vector<Candidate> cands_;     // [vocab]
  size_t n_kept_ = 0;
  double kept_sum_ = 0.0;
  int64_t greedy_id_ = -1;
};

// Index of the largest value (ties: lowest index; NaN never chosen); -1 when none is > -inf.
// ember::argmax_f32, per ISA level.
int64_t argmax(const float* values, int64_t n);

}  // namespace runners
}  // namespace ember
