"""ember ops that lowering passes create by fusing decomposed chains (namespace ``ember``).

Each has an eager reference implementation (the semantics the C++ kernel in
runtime/kernels/fused.cpp implements) and a fake implementation for shape propagation.
Importing this module registers them with ``torch.library``; the fusion passes import it.
"""

from __future__ import annotations

import torch

__all__ = ["add_rms_norm", "rotary_embedding", "swiglu"]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@torch.library.custom_op("ember::rotary_embedding", mutates_args=())
def rotary_embedding(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (HF's ``apply_rotary_pos_emb`` for one tensor).

    x: [..., D] with D even; cos, sin: [..., D] broadcastable to x's shape (the result has x's
    shape and dtype). rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]). Math in fp32.
    """
    xf = x.float()
    out = xf * cos.float() + _rotate_half(xf) * sin.float()
    return out.to(x.dtype)


@rotary_embedding.register_fake
def _(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("ember::swiglu", mutates_args=())
def swiglu(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :n]) * x[..., n:]`` for x: [..., 2n] (a fused gate/up projection's output).

    The result is [..., n] in x's dtype; math in fp32.
    """
    n = x.shape[-1] // 2
    xf = x.float()
    return (torch.nn.functional.silu(xf[..., :n]) * xf[..., n:]).to(x.dtype)


@swiglu.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


@torch.library.custom_op("ember::add_rms_norm", mutates_args=())
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                 eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual`` and ``rms_norm(h, [D], weight, eps)`` in one op: a pre-norm block's residual
    add and the next norm (fp32 x and residual of one shape [..., D]; weight [D] or None; eps None:
    fp32's machine epsilon, as aten::rms_norm). Returns (h, the normalized h)."""
    h = x + residual
    return h, torch.rms_norm(h, [h.shape[-1]], weight, eps)


@add_rms_norm.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
      eps: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(x)
