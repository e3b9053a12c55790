"""Python-level integer ops on symbolic sizes, emitted as `sym::*` runtime kernels."""

from __future__ import annotations

import operator

import torch

SYM_OPS = {
    operator.add: "sym::add",
    operator.sub: "sym::sub",
    operator.mul: "sym::mul",
    operator.floordiv: "sym::floordiv",
    operator.mod: "sym::mod",
    operator.neg: "sym::neg",
    torch.sym_max: "sym::max",
    torch.sym_min: "sym::min",
}
