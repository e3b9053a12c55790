"""Fuse torchao's quantized linear pattern into one ``ember::quantized_linear``:

    linear(x, dequantize_affine(qdata, ...), bias)                       -> act_quant NONE
    linear(dequantize(quantize(x, choose_qparams(x))), dequantize_affine(qdata, ...), bias)
                                                                          -> act_quant INT8_ASYM_PER_TOKEN

The int8 codes become ember's canonical weight (4-bit codes packed two per byte, all-zero zero
points dropped), so the file holds the quantized weight, not a dequantized copy. Runs before
constant folding, which would otherwise fold the dequantization into an fp32 weight.
"""

from __future__ import annotations

import torch

from ember.export.graph import LoweringGraph
from ember.export.passes import PassContext, register_pass
from ember.export.passes._match import call
from ember.export.passes._quant_match import canonical_weight, dynamic_int8_source, replace_with_call, weight_nodes
from ember.export.quant_ops import ActQuant

aten = torch.ops.aten


@register_pass("fuse_quantized_linear")
def fuse_quantized_linear(g: LoweringGraph, ctx: PassContext) -> None:
    fused = 0
    for node in list(g.graph.nodes):
        if not call(node, aten.linear.default) or node.kwargs:
            continue
        w = canonical_weight(g, node.args[1])
        if w is None:
            continue
        x = node.args[0]
        source = dynamic_int8_source(x)
        act = ActQuant.NONE if source is None else ActQuant.INT8_ASYM_PER_TOKEN
        if source is not None:
            x = source
        bias = node.args[2] if len(node.args) > 2 else None
        qdata, scale, zp = weight_nodes(g, node, w)
        replace_with_call(g, node, torch.ops.ember.quantized_linear.default,
                          (x, qdata, scale, zp, None, bias, w.bits, w.group_size, int(act)))
        fused += 1
    if fused:
        g.remove_dead_nodes()
        g.notes.append(f"fused {fused} quantized linear(s)")
