// Fused ops the lowering passes create from decomposed HF code (export/passes/fuse_*.py):
//   ember::rotary_embedding(x, cos, sin) = x * cos + rotate_half(x) * sin
//   ember::swiglu(x)                     = silu(x[..., :n/2]) * x[..., n/2:]
//   ember::add_rms_norm(x, r, w, eps)    = (h = x + r, rms_norm(h, [D], w, eps))
// Each replaces a chain of small kernels per layer in decode. Any float dtype (add_rms_norm: fp32);
// math in fp32.
#include <cfloat>
#include <vector>

#include "gemm.h"
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// Element offset of the row of `t` (rank <= x's, broadcast to x's leading dims) that x's row
// `r` reads; t's last dim equals x's. `st` holds t's strides aligned to x's dims (0 = broadcast).
inline int64_t broadcast_row(int64_t r, const Tensor& x, const int64_t* st) {
  int64_t off = 0;
  for (int d = x.dim - 2; d >= 0; --d) {
    const int64_t i = r % x.sizes[d];
    r /= x.sizes[d];
    off += i * st[d];
  }
  return off;
}

Error broadcast_strides(const Tensor& t, const Tensor& x, int64_t* st, const char* what) {
  char b1[96], b2[96];
  EMBER_CHECK_ARG(t.dim >= 1 && t.dim <= x.dim && t.sizes[t.dim - 1] == x.sizes[x.dim - 1],
                  "rotary_embedding: %s %s does not broadcast to x %s", what, t.describe(b1, sizeof b1),
                  x.describe(b2, sizeof b2));
  int64_t cs[kMaxDims];
  contiguous_strides(t.sizes, t.dim, cs);
  const int shift = x.dim - t.dim;
  for (int d = 0; d < x.dim; ++d) {
    const int64_t s = d < shift ? 1 : t.sizes[d - shift];
    EMBER_CHECK_ARG(s == 1 || s == x.sizes[d], "rotary_embedding: %s %s does not broadcast to x %s", what,
                    t.describe(b1, sizeof b1), x.describe(b2, sizeof b2));
    st[d] = (d < shift || s == 1) ? 0 : cs[d - shift];
  }
  return Error::ok();
}

// rotary_embedding(x [..., D], cos [..., D], sin [..., D]) -> [..., D] (D even).
Error rotary_embedding_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *c = nullptr, *s = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "x"));
  EMBER_TRY(arg_tensor(a, 1, &c, "cos"));
  EMBER_TRY(arg_tensor(a, 2, &s, "sin"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  char xs[96];
  EMBER_CHECK_ARG(x->dim >= 1 && x->sizes[x->dim - 1] % 2 == 0, "rotary_embedding: x %s must have an even last dim",
                  x->describe(xs, sizeof xs));
  int64_t cst[kMaxDims], sst[kMaxDims];
  EMBER_TRY(broadcast_strides(*c, *x, cst, "cos"));
  EMBER_TRY(broadcast_strides(*s, *x, sst, "sin"));
  EMBER_TRY(check_floating(*out, "rotary_embedding output"));
  EMBER_TRY(out->resize(x->sizes, x->dim));
  const int64_t D = x->sizes[x->dim - 1], half = D / 2, rows = D == 0 ? 0 : x->numel() / D;
  F32View xv, cv, sv;
  EMBER_TRY(as_f32(*x, &xv, "rotary_embedding x"));
  EMBER_TRY(as_f32(*c, &cv, "rotary_embedding cos"));
  EMBER_TRY(as_f32(*s, &sv, "rotary_embedding sin"));
  const bool f32_out = out->dtype == DType::kFloat32;
  parallel_rows(rows, D, [&](int64_t rb, int64_t re) {
    std::vector<float> buf(f32_out ? 0 : static_cast<size_t>(D));
    for (int64_t r = rb; r < re; ++r) {
      const float* xr = xv.p + r * D;
      const float* cr = cv.p + broadcast_row(r, *x, cst);
      const float* sr = sv.p + broadcast_row(r, *x, sst);
      float* y = f32_out ? out->ptr<float>() + r * D : buf.data();
      for (int64_t i = 0; i < half; ++i) y[i] = xr[i] * cr[i] - xr[i + half] * sr[i];
      for (int64_t i = half; i < D; ++i) y[i] = xr[i] * cr[i] + xr[i - half] * sr[i];
      if (!f32_out) store_chunk<float>(out->dtype, out->data, r * D, D, y);
    }
  });
  return Error::ok();
}

// swiglu(x [..., 2n]) -> [..., n] = silu(first half) * second half.
Error swiglu_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "x"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  char b1[96];
  EMBER_CHECK_ARG(x->dim >= 1 && x->sizes[x->dim - 1] % 2 == 0, "swiglu: x %s must have an even last dim",
                  x->describe(b1, sizeof b1));
  EMBER_TRY(check_floating(*out, "swiglu output"));
  int64_t osz[kMaxDims];
  for (int d = 0; d < x->dim; ++d) osz[d] = x->sizes[d];
  const int64_t n = x->sizes[x->dim - 1] / 2;
  osz[x->dim - 1] = n;
  EMBER_TRY(out->resize(osz, x->dim));
  const int64_t rows = n == 0 ? 0 : out->numel() / n;
  F32View xv;
  EMBER_TRY(as_f32(*x, &xv, "swiglu x"));
  const bool f32_out = out->dtype == DType::kFloat32;
  parallel_rows(rows, 2 * n, [&](int64_t rb, int64_t re) {
    std::vector<float> buf(f32_out ? 0 : static_cast<size_t>(n));
    for (int64_t r = rb; r < re; ++r) {
      const float* g = xv.p + r * 2 * n;
      float* y = f32_out ? out->ptr<float>() + r * n : buf.data();
      silu_f32(g, y, n);
      for (int64_t i = 0; i < n; ++i) y[i] *= g[n + i];
      if (!f32_out) store_chunk<float>(out->dtype, out->data, r * n, n, y);
    }
  });
  return Error::ok();
}

// add_rms_norm(x, residual, weight?, eps?) -> (h, y): h = x + residual, y = rms_norm(h, [D],
// weight, eps) (eps None: fp32's machine epsilon), row by row in one pass: the bits of aten::add
// and aten::rms_norm one after the other. fp32 x and residual of one shape [..., D] (what
// fuse_add_rms_norm matches); weight fp32 [D] or None.
Error add_rms_norm_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *r = nullptr, *w = nullptr, *h = nullptr, *y = nullptr;
  double eps = 0;
  bool has_eps = false;
  EMBER_TRY(arg_tensor(a, 0, &x, "x"));
  EMBER_TRY(arg_tensor(a, 1, &r, "residual"));
  EMBER_TRY(arg_opt_tensor(a, 2, &w, "weight"));
  EMBER_TRY(arg_opt_double(a, 3, &eps, &has_eps, "eps"));
  EMBER_TRY(arg_tensor(a, a.n - 2, &h, "sum"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &y, "out"));
  char b1[96], b2[96];
  const bool f32 = x->dtype == DType::kFloat32 && r->dtype == DType::kFloat32 && h->dtype == DType::kFloat32 &&
                   y->dtype == DType::kFloat32 && (w == nullptr || w->dtype == DType::kFloat32);
  EMBER_CHECK_ARG(f32, "add_rms_norm: x, residual, weight and outputs must be float32, got x %s, residual %s",
                  dtype_name(x->dtype), dtype_name(r->dtype));
  EMBER_CHECK_ARG(x->dim >= 1 && same_shape(*x, *r), "add_rms_norm: x %s and residual %s must have one shape",
                  x->describe(b1, sizeof b1), r->describe(b2, sizeof b2));
  const int64_t D = x->sizes[x->dim - 1];
  EMBER_CHECK_ARG(w == nullptr || w->numel() == D, "add_rms_norm: weight has %" PRId64 " elements, expected %" PRId64,
                  w ? w->numel() : 0, D);
  if (!has_eps) eps = FLT_EPSILON;
  EMBER_TRY(h->resize(x->sizes, x->dim));
  EMBER_TRY(y->resize(x->sizes, x->dim));
  const int64_t rows = D == 0 ? 0 : x->numel() / D;
  const float *xp = x->ptr<float>(), *rp = r->ptr<float>(), *wp = w ? w->ptr<float>() : nullptr;
  float *hp = h->ptr<float>(), *yp = y->ptr<float>();
  const float e = static_cast<float>(eps);
  parallel_rows(rows, D, [&](int64_t rb, int64_t re) {
    for (int64_t m = rb; m < re; ++m) {
      float* hr = hp + m * D;
      for (int64_t i = 0; i < D; ++i) hr[i] = xp[m * D + i] + rp[m * D + i];
      rms_norm_row_f32(hr, wp, D, e, yp + m * D);
    }
  });
  return Error::ok();
}

}  // namespace

void register_fused_kernels(KernelRegistry& r) {
  r.add("ember::add_rms_norm.default", KernelDef{add_rms_norm_k, 4, 2, false});
  r.add("ember::rotary_embedding.default", KernelDef{rotary_embedding_k, 3, 1, false});
  r.add("ember::swiglu.default", KernelDef{swiglu_k, 1, 1, false});
}

}  // namespace ember
