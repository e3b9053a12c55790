#include "ember/runners/text_decoder.h"

#include <cstring>
#include <string>
#include <vector>

#include "ember/runtime/dtype.h"
#include "ember/runtime/thread_pool.h"

namespace ember {
namespace runners {

Result<std::unique_ptr<TextDecoder>> TextDecoder::create(std::shared_ptr<Program> program, std::string_view method,
                                                         std::shared_ptr<ProgramState> state,
                                                         std::shared_ptr<StepBatcher> batcher) {
  EMBER_CHECK_ARG(program != nullptr, "TextDecoder::create got a null program");
  auto info = LlmInfo::from_program(*program);
  if (!info.ok()) return info.error();
  auto m = program->load_method(method, state);
  if (!m.ok()) return m.error().with_context("loading the LLM method");
  std::unique_ptr<TextDecoder> d(new TextDecoder());
  d->program_ = std::move(program);
  d->state_ = std::move(state);
  d->method_ = std::move(m).value();
  d->batcher_ = std::move(batcher);
  d->info_ = std::move(info).value();
  EMBER_CHECK(d->method_->num_inputs() == 2 && d->method_->num_outputs() >= 1, ErrorCode::kInvalidProgram,
              "method '%.*s' has %zu inputs and %zu outputs; an LLM forward takes (tokens, input_pos) and "
              "returns logits", static_cast<int>(method.size()), method.data(), d->method_->num_inputs(),
              d->method_->num_outputs());
  // llm.vocab_size sizes the sampler's buffers: it must be the logits' last dim as declared by
  // the method (a file cannot claim 2^27 tokens for a 49,152-column output).
  const TensorSpec& out_spec = d->method_->output_spec(0);
  EMBER_CHECK(!out_spec.sizes.empty() && out_spec.sizes.back() == d->info_.vocab_size, ErrorCode::kInvalidProgram,
              "llm.vocab_size is %lld but the method's logits output has %s%lld columns; the file is corrupted",
              static_cast<long long>(d->info_.vocab_size), out_spec.sizes.empty() ? "no shape, not " : "",
              static_cast<long long>(out_spec.sizes.empty() ? 0 : out_spec.sizes.back()));
  // The input spec bounds T; trust the smaller of it and the metadata.
  const TensorSpec& spec = d->method_->input_spec(0);
  if (spec.sizes.size() == 2 && spec.sizes[1] > 0 && spec.sizes[1] < d->info_.max_seq_len) {
    d->info_.max_seq_len = spec.sizes[1];
  }
  return d;
}

size_t TextDecoder::state_bytes() const {
  if (state_ != nullptr) return state_->nbytes();
  size_t n = 0;
  for (const StateInfo& s : program_->state()) n += (s.tensor.capacity + 63) / 64 * 64;
  return n;
}

Error TextDecoder::bind(const int64_t* tokens, int64_t n, int64_t pos) {
  EMBER_CHECK_ARG(n >= 1 && n <= info_.max_seq_len, "a forward step takes 1..%lld tokens (llm.max_seq_len), got %lld",
                  static_cast<long long>(info_.max_seq_len), static_cast<long long>(n));
  EMBER_CHECK_ARG(pos >= 0 && pos + n <= info_.max_context_len,
                  "positions [%lld, %lld) are outside the context of %lld tokens (llm.max_context_len)",
                  static_cast<long long>(pos), static_cast<long long>(pos + n),
                  static_cast<long long>(info_.max_context_len));
  for (int64_t i = 0; i < n; ++i) {
    EMBER_CHECK_ARG(tokens[i] >= 0 && tokens[i] < info_.vocab_size,
                    "token id %lld at index %lld is outside the vocabulary [0, %lld)",
                    static_cast<long long>(tokens[i]), static_cast<long long>(i),
                    static_cast<long long>(info_.vocab_size));
  }
  Tensor t;
  t.data = const_cast<int64_t*>(tokens);  // read-only by the method
  t.dtype = DType::kInt64;
  t.dim = 2;
  t.sizes[0] = 1;
  t.sizes[1] = n;
  t.capacity = static_cast<size_t>(n) * sizeof(int64_t);
  pos_buf_[0] = pos;
  Tensor p;
  p.data = pos_buf_;
  p.dtype = DType::kInt64;
  p.dim = 1;
  p.sizes[0] = 1;
  p.capacity = sizeof(int64_t);
  EMBER_TRY(method_->set_input(0, t));
  return method_->set_input(1, p);
}

Result<const float*> TextDecoder::step(const int64_t* tokens, int64_t n, int64_t pos) {
  EMBER_TRY(bind(tokens, n, pos));
  last_batch_ = 1;
  ThreadCap cap(threads_);  // the batcher carries it to whichever thread runs the step
  EMBER_TRY(batcher_ != nullptr ? batcher_->run(method_.get(), n == 1, &last_batch_) : method_->execute());
  return last_logits();
}

// A Chain as the batcher's (StepBatcher::Chain): binds each step the chain asks for.
class TextDecoder::BatcherChain final : public StepBatcher::Chain {
 public:
  BatcherChain(TextDecoder* decoder, TextDecoder::Chain* chain) : decoder_(decoder), chain_(chain) {}

  bool next(const Error& step, size_t batch) override {
    decoder_->last_batch_ = batch;
    last_ = step ? Result<const float*>(step) : decoder_->last_logits();
    int64_t pos = 0;
    if (!chain_->next(&last_, &decoder_->chain_token_, &pos)) return false;
    Error e = decoder_->bind(&decoder_->chain_token_, 1, pos);
    if (!e) return true;
    last_ = std::move(e);  // the chain's next step fails its checks: step() returns why
    return false;
  }
  // What step() returns: the last step's result, as the chain left it, or a bind failure.
  Result<const float*> last_{static_cast<const float*>(nullptr)};

 private:
  TextDecoder* decoder_;
  TextDecoder::Chain* chain_;
};

Result<const float*> TextDecoder::step(const int64_t* tokens, int64_t n, int64_t pos, Chain* chain) {
  if (chain == nullptr) return step(tokens, n, pos);
  EMBER_TRY(bind(tokens, n, pos));
  last_batch_ = 1;
  ThreadCap cap(threads_);
  BatcherChain links(this, chain);
  if (batcher_ != nullptr) {
    (void)batcher_->run(method_.get(), n == 1, nullptr, &links);  // every step's result reaches links
  } else {
    while (links.next(method_->execute(), 1)) {
    }
  }
  return std::move(links.last_);
}

Error TextDecoder::step_batch(TextDecoder* const* decoders, size_t n, const int64_t* const* tokens,
                              const int64_t* counts, const int64_t* positions, const float** logits) {
  std::vector<Method*> methods(n);
  for (size_t i = 0; i < n; ++i) {
    EMBER_CHECK_ARG(decoders[i] != nullptr, "step_batch: decoder %zu is null", i);
    Error e = decoders[i]->bind(tokens[i], counts[i], positions[i]);
    if (e) return e.with_context("step_batch, decoder " + std::to_string(i));
    methods[i] = decoders[i]->method_.get();
  }
  std::vector<Error> errors(n);
  int threads = decoders[0]->threads_;
  for (size_t i = 1; i < n; ++i) threads = ThreadCap::merge(threads, decoders[i]->threads_);
  ThreadCap cap(threads);
  Method::execute_batch(methods.data(), n, errors.data());
  for (size_t i = 0; i < n; ++i) {
    if (errors[i]) return errors[i].with_context("step_batch, decoder " + std::to_string(i));
    decoders[i]->last_batch_ = n;
    Result<const float*> l = decoders[i]->last_logits();
    if (!l.ok()) return l.error().with_context("step_batch, decoder " + std::to_string(i));
    logits[i] = *l;
  }
  return Error::ok();
}

Result<const float*> TextDecoder::last_logits() {
  const EValue& out = method_->output(0);
  EMBER_CHECK(out.is_tensor(), ErrorCode::kInvalidProgram, "forward output 0 is a %s, expected a logits tensor",
              tag_name(out.tag));
  const Tensor& logits = out.tensor;
  EMBER_CHECK(logits.dim >= 1 && logits.size(-1) == info_.vocab_size, ErrorCode::kInvalidProgram,
              "forward returned logits whose last dim is %lld, expected llm.vocab_size = %lld",
              static_cast<long long>(logits.dim >= 1 ? logits.size(-1) : 0), static_cast<long long>(info_.vocab_size));
  // Last position: the final row whatever the leading dims ([1, V] or [1, T, V]).
  const int64_t rows = logits.numel() / info_.vocab_size;
  EMBER_CHECK(rows >= 1, ErrorCode::kInvalidProgram, "forward returned empty logits");
  const size_t offset = static_cast<size_t>(rows - 1) * static_cast<size_t>(info_.vocab_size);
  switch (logits.dtype) {
    case DType::kFloat32:
      return logits.ptr<const float>() + offset;
    case DType::kFloat16:
    case DType::kBFloat16: {
      converted_.resize(static_cast<size_t>(info_.vocab_size));
      const uint16_t* src = logits.ptr<const uint16_t>() + offset;
      const bool half = logits.dtype == DType::kFloat16;
      for (int64_t i = 0; i < info_.vocab_size; ++i) {
        converted_[static_cast<size_t>(i)] = half ? half_to_float(src[i]) : bf16_to_float(src[i]);
      }
      return static_cast<const float*>(converted_.data());
    }
    default:
      return Error::make(ErrorCode::kInvalidProgram, "forward returned %s logits; expected a floating type",
                         dtype_name(logits.dtype));
  }
}

}  // namespace runners
}  // namespace ember
