// Matrix products: linear (the LLM hot path), mm, bmm, addmm, baddbmm, matmul.
// Compute is fp32 (fp16/bf16 operands are converted; weights are converted while packing).
#include <vector>

#include "gemm.h"
#include "kernel_utils.h"

namespace ember {
namespace {

using namespace kern;

// Where fp32 results go: the output itself when it is fp32, else a temporary converted at
// the end by finish().
struct F32Out {
  float* p = nullptr;
  std::vector<float> storage;
  Tensor* t = nullptr;
  void finish() {
    if (t->dtype != DType::kFloat32) convert_elements(DType::kFloat32, storage.data(), t->dtype, t->data, t->numel());
  }
};

Error out_f32(Tensor& t, F32Out* o) {
  EMBER_TRY(check_floating(t, "output"));
  o->t = &t;
  if (t.dtype == DType::kFloat32) {
    o->p = t.ptr<float>();
  } else {
    o->storage.resize(static_cast<size_t>(t.numel()));
    o->p = o->storage.data();
  }
  return Error::ok();
}

// linear(input [..., K], weight [N, K], bias? [N]) -> [..., N]
Error linear_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *w = nullptr, *b = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "input"));
  EMBER_TRY(arg_tensor(a, 1, &w, "weight"));
  EMBER_TRY(arg_opt_tensor(a, 2, &b, "bias"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_rank(*w, 2, "linear weight"));
  EMBER_TRY(check_floating(*w, "linear weight"));
  EMBER_CHECK_ARG(x->dim >= 1, "linear: input must have rank >= 1");
  const int64_t N = w->sizes[0], K = w->sizes[1];
  char b1[96], b2[96];
  EMBER_CHECK_ARG(x->sizes[x->dim - 1] == K, "linear: input %s does not match weight %s (last dim must be %" PRId64 ")",
                  x->describe(b1, sizeof b1), w->describe(b2, sizeof b2), K);
  int64_t osz[kMaxDims];
  for (int d = 0; d < x->dim - 1; ++d) osz[d] = x->sizes[d];
  osz[x->dim - 1] = N;
  EMBER_TRY(out->resize(osz, x->dim));
  const int64_t M = x->prod(0, x->dim - 1);
  F32View xv, bv;
  EMBER_TRY(as_f32(*x, &xv, "linear input"));
  if (b) {
    EMBER_CHECK_ARG(b->numel() == N, "linear: bias has %" PRId64 " elements, expected %" PRId64, b->numel(), N);
    EMBER_TRY(as_f32(*b, &bv, "linear bias"));
  }
  F32Out ov;
  EMBER_TRY(out_f32(*out, &ov));
  gemm(M, N, K, xv.p, K, w->data, w->dtype, K, true, ov.p, N, b ? bv.p : nullptr);
  ov.finish();
  return Error::ok();
}

// Batched matmul with broadcast batch dims. a: [..., M, K], b: [..., K, N] (after 1-D
// promotion). Result shape in `osz`/`ond` (1-D dims already dropped by the caller).
Error batched_matmul(const Tensor& ta, const Tensor& tb, Tensor& out, const int64_t* asz, int and_, const int64_t* bsz,
                     int bnd, const int64_t* osz, int ond) {
  const int64_t M = asz[and_ - 2], K = asz[and_ - 1], N = bsz[bnd - 1];
  EMBER_CHECK_ARG(bsz[bnd - 2] == K, "matmul: inner dims differ (%" PRId64 " vs %" PRId64 ")", K, bsz[bnd - 2]);
  // Broadcast batch dims.
  const int abd = and_ - 2, bbd = bnd - 2;
  const int nb = std::max(abd, bbd);
  int64_t bshape[kMaxDims], ast[kMaxDims], bst[kMaxDims];
  int64_t nbatch = 1;
  for (int d = 0; d < nb; ++d) {
    const int da = d - (nb - abd), db = d - (nb - bbd);
    const int64_t sa = da >= 0 ? asz[da] : 1, sb = db >= 0 ? bsz[db] : 1;
    EMBER_CHECK_ARG(sa == sb || sa == 1 || sb == 1, "matmul: batch dims do not broadcast (%" PRId64 " vs %" PRId64 ")", sa, sb);
    bshape[d] = std::max(sa, sb);
    if (sa == 0 || sb == 0) bshape[d] = 0;
    nbatch *= bshape[d];
  }
  // Element strides of each batch dim for a and b (0 when broadcast).
  {
    int64_t s = M * K;
    for (int d = nb - 1; d >= 0; --d) {
      const int da = d - (nb - abd);
      const int64_t sa = da >= 0 ? asz[da] : 1;
      ast[d] = sa == 1 ? 0 : s;
      s *= sa;
    }
    s = K * N;
    for (int d = nb - 1; d >= 0; --d) {
      const int db = d - (nb - bbd);
      const int64_t sb = db >= 0 ? bsz[db] : 1;
      bst[d] = sb == 1 ? 0 : s;
      s *= sb;
    }
  }
  EMBER_TRY(out.resize(osz, ond));
  EMBER_CHECK_ARG(out.numel() == nbatch * M * N, "matmul: result shape mismatch");
  F32View av;
  EMBER_TRY(as_f32(ta, &av, "matmul self"));
  EMBER_TRY(check_floating(tb, "matmul other"));
  F32Out ov;
  EMBER_TRY(out_f32(out, &ov));
  const size_t bes = tb.element_size();
  int64_t idx[kMaxDims] = {};
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t ao = 0, bo = 0;
    for (int d = 0; d < nb; ++d) {
      ao += idx[d] * ast[d];
      bo += idx[d] * bst[d];
    }
    gemm(M, N, K, av.p + ao, K, static_cast<const uint8_t*>(tb.data) + static_cast<size_t>(bo) * bes, tb.dtype, N, false,
         ov.p + bi * M * N, N, nullptr);
    for (int d = nb - 1; d >= 0; --d) {
      if (++idx[d] < bshape[d]) break;
      idx[d] = 0;
    }
  }
  ov.finish();
  return Error::ok();
}

Error matmul_k(KernelContext&, KernelArgs a) {
  Tensor *x = nullptr, *y = nullptr, *out = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "self"));
  EMBER_TRY(arg_tensor(a, 1, &y, "other"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_CHECK_ARG(x->dim >= 1 && y->dim >= 1, "matmul: both operands need rank >= 1 (got %d and %d)",
                  static_cast<int>(x->dim), static_cast<int>(y->dim));
  int64_t asz[kMaxDims + 1], bsz[kMaxDims + 1], osz[kMaxDims + 1];
  int an = 0, bn = 0, on = 0;
  if (x->dim == 1) {
    asz[an++] = 1;
    asz[an++] = x->sizes[0];
  } else {
    for (int d = 0; d < x->dim; ++d) asz[an++] = x->sizes[d];
  }
  if (y->dim == 1) {
    bsz[bn++] = y->sizes[0];
    bsz[bn++] = 1;
  } else {
    for (int d = 0; d < y->dim; ++d) bsz[bn++] = y->sizes[d];
  }
  const int nb = std::max(an, bn) - 2;
  for (int d = 0; d < nb; ++d) {
    const int da = d - (nb - (an - 2)), db = d - (nb - (bn - 2));
    const int64_t sa = da >= 0 ? asz[da] : 1, sb = db >= 0 ? bsz[db] : 1;
    osz[on++] = (sa == 0 || sb == 0) ? 0 : std::max(sa, sb);
  }
  if (x->dim != 1) osz[on++] = asz[an - 2];
  if (y->dim != 1) osz[on++] = bsz[bn - 1];
  EMBER_CHECK_ARG(on <= kMaxDims, "matmul: result rank too large");
  return batched_matmul(*x, *y, *out, asz, an, bsz, bn, osz, on);
}

Error mm_k(KernelContext& c, KernelArgs a) {  // mm(self [M,K], mat2 [K,N])
  Tensor *x = nullptr, *y = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "self"));
  EMBER_TRY(arg_tensor(a, 1, &y, "mat2"));
  EMBER_TRY(check_rank(*x, 2, "mm self"));
  EMBER_TRY(check_rank(*y, 2, "mm mat2"));
  return matmul_k(c, a);
}
Error bmm_k(KernelContext& c, KernelArgs a) {  // bmm(self [B,M,K], mat2 [B,K,N])
  Tensor *x = nullptr, *y = nullptr;
  EMBER_TRY(arg_tensor(a, 0, &x, "self"));
  EMBER_TRY(arg_tensor(a, 1, &y, "mat2"));
  EMBER_TRY(check_rank(*x, 3, "bmm self"));
  EMBER_TRY(check_rank(*y, 3, "bmm mat2"));
  EMBER_CHECK_ARG(x->sizes[0] == y->sizes[0], "bmm: batch sizes differ (%" PRId64 " vs %" PRId64 ")", x->sizes[0], y->sizes[0]);
  return matmul_k(c, a);
}

// out = beta * self + alpha * (m1 @ m2), self broadcast to the product's shape.
Error add_scaled(const Tensor& self, double beta, double alpha, Tensor& out, const char* op) {
  EMBER_CHECK_ARG(self.dim <= out.dim, "%s: self of rank %d does not broadcast to the result", op, static_cast<int>(self.dim));
  const Tensor* ins[2] = {&out, &self};
  const float fb = static_cast<float>(beta), fa = static_cast<float>(alpha);
  if (beta == 0) {
    const Tensor* one[1] = {&out};
    return map_elements<float, float, 1>(out, one, [fa](float p) { return fa * p; });
  }
  return map_elements<float, float, 2>(out, ins, [fb, fa](float p, float s) { return fb * s + fa * p; });
}

// addmm(self, mat1, mat2, beta, alpha) and baddbmm(self, batch1, batch2, beta, alpha):
// out = beta * self + alpha * (m1 @ m2) for rank-2 or rank-3 (batched) operands.
Error add_matmul(KernelArgs a, int rank, const char* what) {
  Tensor *self = nullptr, *m1 = nullptr, *m2 = nullptr, *out = nullptr;
  double beta = 1, alpha = 1;
  EMBER_TRY(arg_tensor(a, 0, &self, "self"));
  EMBER_TRY(arg_tensor(a, 1, &m1, rank == 2 ? "mat1" : "batch1"));
  EMBER_TRY(arg_tensor(a, 2, &m2, rank == 2 ? "mat2" : "batch2"));
  EMBER_TRY(arg_double(a, 3, &beta, "beta"));
  EMBER_TRY(arg_double(a, 4, &alpha, "alpha"));
  EMBER_TRY(arg_tensor(a, a.n - 1, &out, "out"));
  EMBER_TRY(check_rank(*m1, rank, what));
  EMBER_TRY(check_rank(*m2, rank, what));
  EMBER_CHECK_ARG(rank == 2 || m1->sizes[0] == m2->sizes[0], "%s: batch sizes differ", what);
  EMBER_CHECK_ARG(out->data != self->data, "%s: output may not alias self", what);
  int64_t osz[3];
  for (int d = 0; d < rank - 1; ++d) osz[d] = m1->sizes[d];
  osz[rank - 1] = m2->sizes[rank - 1];
  EMBER_TRY(batched_matmul(*m1, *m2, *out, m1->sizes, rank, m2->sizes, rank, osz, rank));
  return add_scaled(*self, beta, alpha, *out, what);
}
Error addmm_k(KernelContext&, KernelArgs a) { return add_matmul(a, 2, "addmm"); }
Error baddbmm_k(KernelContext&, KernelArgs a) { return add_matmul(a, 3, "baddbmm"); }

}  // namespace

void register_linear_kernels(KernelRegistry& r) {
  r.add("aten::linear.default", KernelDef{linear_k, 3, 1, false});
  r.add("aten::mm.default", KernelDef{mm_k, 2, 1, false});
  r.add("aten::bmm.default", KernelDef{bmm_k, 2, 1, false});
  r.add("aten::matmul.default", KernelDef{matmul_k, 2, 1, false});
  r.add("aten::addmm.default", KernelDef{addmm_k, 5, 1, false});
  r.add("aten::baddbmm.default", KernelDef{baddbmm_k, 5, 1, false});
}

}  // namespace ember
