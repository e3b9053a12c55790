"""Fuse torchao's quantized embedding pattern into one ``ember::quantized_embedding``:

    embedding(dequantize_affine(qdata, ...), indices)  ->  quantized_embedding(qdata', scale, zp, None, indices, ...)

The table stays quantized in the file (a tied lm_head quantized the same way reads the same,
deduplicated, tensors). Runs before constant folding.
"""

from __future__ import annotations

import torch

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import call
from ember.export.passes._quant_match import canonical_weight, replace_with_call, weight_nodes

aten = torch.ops.aten


@register_pass("fuse_quantized_embedding")
def fuse_quantized_embedding(g: LoweringGraph, ctx: PassContext) -> None:
    fused = 0
    for node in list(g.graph.nodes):
        # embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False): the
        # training-only flags do not change the forward result.
        if not call(node, aten.embedding.default):
            continue
        w = canonical_weight(g, node.args[0])
        if w is None:
            continue
        qdata, scale, zp = weight_nodes(g, node, w)
        replace_with_call(g, node, torch.ops.ember.quantized_embedding.default,
                          (qdata, scale, zp, None, node.args[1], w.bits, w.group_size, w.dtype))
        fused += 1
    if fused:
        g.remove_dead_nodes()
        g.notes.append(f"fused {fused} quantized embedding(s)")
