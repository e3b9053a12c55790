"""Graph passes run on every method before emission, in registration order.

Each pass is one file exposing a function `(LoweringGraph, PassContext) -> None` registered with
`@register_pass(name)`; it rewrites the FX graph in place and may append a note for the summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ember.export.graph import LoweringGraph


@dataclass(frozen=True)
class PassContext:
    kernel_names: frozenset[str]     # ops the runtime implements
    fold_limit_bytes: int            # largest constant a folded op may create


PassFn = Callable[[LoweringGraph, PassContext], None]
PASSES: list[tuple[str, PassFn]] = []


def register_pass(name: str) -> Callable[[PassFn], PassFn]:
    def deco(fn: PassFn) -> PassFn:
        PASSES.append((name, fn))
        return fn

    return deco


def ops_the_passes_fuse() -> set[Any]:
    """Ops that decomposition must leave whole so a pass can recognize their pattern."""
    from ember.export.passes._quant_match import torchao_quant_ops

    return torchao_quant_ops()


def run_passes(g: LoweringGraph, ctx: PassContext, skip: frozenset[str] = frozenset()) -> None:
    _load_builtin_passes()
    for name, fn in PASSES:
        if name not in skip:
            fn(g, ctx)
    g.graph.lint()


def _load_builtin_passes() -> None:
    # Imported for their registration; order here is the order passes run.
    from ember.export.passes import (  # noqa: F401
        drop_asserts,
        remove_noops,
        specialize_sym_sizes,
        fuse_quantized_linear,  # before constant folding, which would dequantize the weights
        fuse_quantized_embedding,
        constant_folding,
        fuse_sibling_linears,
        fuse_sibling_quantized_linears,
        fuse_rms_norm,
        fuse_add_rms_norm,  # after fuse_rms_norm, whose norms it takes
        fuse_rotary,
        fuse_swiglu,
        select_to_view,
        dead_code,
    )
