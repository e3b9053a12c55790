"""Apply a ``QuantRecipe`` to an HF model with torchao's ``quantize_`` (before ``torch.export``).

``plan_quantization`` decides what every linear and embedding becomes and checks each layer's
size against its group size (a clear error names the layer, its size and the group sizes that
fit), before anything is quantized. ``quantize_model`` then runs one ``quantize_`` per distinct
config. The lowering passes turn torchao's exported patterns into ember's canonical ops.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn

from .recipe import PER_CHANNEL, QuantRecipe, WeightQuant, fitting_group_sizes

__all__ = ["PlannedWeight", "QuantPlan", "plan_quantization", "quantize_model"]


@dataclass(frozen=True)
class PlannedWeight:
    name: str  # module name in the model
    kind: str  # "linear" | "output" | "embedding"
    shape: tuple[int, int]  # [N, K]
    quant: WeightQuant | None  # None: stays float

    @property
    def quantized_bytes(self) -> int:
        """Bytes in the file: codes plus per-group scales, zero points or offsets."""
        n, k = self.shape
        if self.quant is None:
            return n * k * 4
        q = self.quant
        groups = n * (1 if q.group_size == PER_CHANNEL else k // q.group_size)
        scale_bytes = 4 if q.scale_dtype.value == "float32" else 2
        per_group = scale_bytes * (2 if q.mapping.value == "asym-float" else 1) + (1 if q.mapping.value == "asym" else 0)
        return n * k * q.bits // 8 + groups * per_group


@dataclass(frozen=True)
class QuantPlan:
    recipe: QuantRecipe
    weights: tuple[PlannedWeight, ...]
    tied: bool  # the lm_head and the embedding share one weight in the source model

    @property
    def shares_table(self) -> bool:
        """A tied lm_head reads the embedding's quantized table (stored once in the file)."""
        out = next((w for w in self.weights if w.kind == "output"), None)
        emb = next((w for w in self.weights if w.kind == "embedding"), None)
        return (self.tied and out is not None and emb is not None and out.quant is not None
                and emb.quant is not None and out.quant.weight_only() == emb.quant)

    def summary(self) -> str:
        counts: dict[str, int] = defaultdict(int)
        for w in self.weights:
            counts[w.quant.describe() if w.quant else "float"] += 1
        lines = [f"quantization: {self.recipe.describe()}"]
        lines += [f"  {n:4d} x {what}" for what, n in sorted(counts.items())]
        if self.tied:
            lines.append("  lm_head reads the embedding's quantized table (stored once)" if self.shares_table else
                         "  lm_head is tied to the embedding but quantized differently: the table is stored twice")
        return "\n".join(lines)


def _check_fits(name: str, k: int, quant: WeightQuant) -> None:
    group = quant.group_for(k)
    if k % group or (quant.bits == 4 and k % 2):
        fits = fitting_group_sizes(k)
        raise ValueError(
            f"layer '{name}' has {k} inputs, which group size {quant.group_size} does not divide; group sizes that "
            f"fit: {fits + [PER_CHANNEL]} ({PER_CHANNEL} = per channel), or exclude the layer with an override "
            f"(e.g. --qoverride '{name}=float')")


def plan_quantization(model: nn.Module, recipe: QuantRecipe) -> QuantPlan:
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    inputs = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    tied = output is not None and inputs is not None and output.weight is inputs.weight
    weights = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            is_output = module is output
            quant = recipe.for_linear(name, is_output=is_output, tied=tied)
            kind = "output" if is_output else "linear"
        elif isinstance(module, nn.Embedding):
            quant, kind = recipe.for_embedding(name), "embedding"
        else:
            continue
        n, k = module.weight.shape
        if quant is not None:
            _check_fits(name, k, quant)
        weights.append(PlannedWeight(name, kind, (int(n), int(k)), quant))
    if not any(w.quant is not None for w in weights):
        raise ValueError(f"recipe {recipe.describe()} quantizes no layer of this model (check the override patterns "
                         f"against module names such as {[w.name for w in weights[:3]]})")
    return QuantPlan(recipe, tuple(weights), tied)


def quantize_model(model: nn.Module, recipe: QuantRecipe) -> QuantPlan:
    """Quantizes ``model`` in place with torchao and returns the plan it followed."""
    from torchao.quantization import quantize_

    from .torchao_configs import torchao_config

    plan = plan_quantization(model, recipe)
    groups: dict[WeightQuant, set[str]] = defaultdict(set)
    for w in plan.weights:
        if w.quant is not None:
            groups[w.quant].add(w.name)
    with torch.no_grad():
        for quant, names in groups.items():
            quantize_(model, torchao_config(quant), filter_fn=lambda m, fqn, names=names: fqn in names)
    return plan
