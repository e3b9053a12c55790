"""Typed quantization recipes: what each weight of a model becomes (pure Python, no torch).

A ``QuantRecipe`` names a ``WeightQuant`` for the linears, the embedding and the output layer
(lm_head), plus per-module overrides by name pattern. Everything is validated on construction,
so a bad recipe fails before any model is loaded, with the value and what to use instead.
``ember.quant.torchao_configs`` turns a recipe into torchao ``quantize_`` configs.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

__all__ = ["Scheme", "LinearActivations", "Mapping", "Algorithm", "ScaleDType", "WeightQuant", "Override", "QuantRecipe",
           "GROUP_SIZES", "PER_CHANNEL", "fitting_group_sizes"]

PER_CHANNEL = 0  # group_size value meaning one group per row
GROUP_SIZES = (16, 32, 64, 128, 256)


def _parse(enum: type[Enum], value: Any, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not supported; use one of {[e.value for e in enum]}") from None


class Scheme(str, Enum):
    """Weight bits and whether activations are quantized dynamically (torchao's names)."""

    W8 = "8w"  # int8 weights, float activations
    W4 = "4w"  # int4 weights, float activations
    DA8W4 = "8da4w"  # int8 dynamic per-token activations x int4 weights
    DA8W8 = "8da8w"  # int8 dynamic per-token activations x int8 weights

    @property
    def bits(self) -> int:
        return 4 if self in (Scheme.W4, Scheme.DA8W4) else 8

    @property
    def dynamic_activations(self) -> bool:
        return self in (Scheme.DA8W4, Scheme.DA8W8)


class LinearActivations(str, Enum):
    """What weight-only quantized linears compute with (``--qactivations``; ember.quant.activations)."""

    FLOAT = "float"  # exact float activations (the default)
    INT8 = "int8"  # dynamic int8 symmetric per group of the weight's group size (llama.cpp's Q8_0 activations)

    @classmethod
    def parse(cls, value: "LinearActivations | str") -> "LinearActivations":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"activations {value!r} is not supported; use one of {[a.value for a in cls]}") from None


class Mapping(str, Enum):
    """How a group's range maps onto the integer grid."""

    SYMMETRIC = "sym"  # w = q * s
    ASYMMETRIC = "asym"  # w = (q - z) * s, integer z (torchao's affine, zero exactly representable)
    FLOAT_OFFSET = "asym-float"  # w = q * s + m: the group's min/max exactly (GGUF Q4_1 / tinygemm style)


class Algorithm(str, Enum):
    """How torchao chooses scales (IntxChooseQParamsAlgorithm)."""

    AFFINE = "affine"  # min/max
    HQQ = "hqq"  # half-quadratic, scale only (symmetric)


class ScaleDType(str, Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


def fitting_group_sizes(k: int) -> list[int]:
    """The group sizes that divide a row of k inputs (per channel always fits)."""
    return [g for g in GROUP_SIZES if k % g == 0]


@dataclass(frozen=True)
class WeightQuant:
    """How one weight is quantized. group_size: one of GROUP_SIZES, or PER_CHANNEL (0)."""

    scheme: Scheme
    group_size: int = 32
    mapping: Mapping = Mapping.SYMMETRIC
    algorithm: Algorithm = Algorithm.AFFINE
    scale_dtype: ScaleDType = ScaleDType.FLOAT32

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheme", _parse(Scheme, self.scheme, "quantization scheme"))
        object.__setattr__(self, "mapping", _parse(Mapping, self.mapping, "weight mapping"))
        object.__setattr__(self, "algorithm", _parse(Algorithm, self.algorithm, "qparams algorithm"))
        object.__setattr__(self, "scale_dtype", _parse(ScaleDType, self.scale_dtype, "scale dtype"))
        g = self.group_size
        if isinstance(g, bool) or not isinstance(g, int) or (g != PER_CHANNEL and g not in GROUP_SIZES):
            raise ValueError(f"group size {g!r} is not supported; use one of {list(GROUP_SIZES)} "
                             f"or {PER_CHANNEL} for per channel")
        if self.algorithm is Algorithm.HQQ and self.mapping is not Mapping.SYMMETRIC:
            raise ValueError(f"the hqq algorithm chooses symmetric scales only; got mapping "
                             f"{self.mapping.value!r}: use mapping 'sym' with hqq, or algorithm 'affine'")
        if self.algorithm is Algorithm.HQQ and g == PER_CHANNEL:
            raise ValueError("the hqq algorithm needs a group size (e.g. 32), not per channel")

    @property
    def bits(self) -> int:
        return self.scheme.bits

    def weight_only(self) -> "WeightQuant":
        """The same weight format without activation quantization (an embedding's view of it)."""
        only = {Scheme.DA8W4: Scheme.W4, Scheme.DA8W8: Scheme.W8}.get(self.scheme, self.scheme)
        return replace(self, scheme=only)

    def describe(self) -> str:
        group = "per-channel" if self.group_size == PER_CHANNEL else f"g{self.group_size}"
        text = f"{self.scheme.value} {group} {self.mapping.value}"
        if self.algorithm is not Algorithm.AFFINE:
            text += f" {self.algorithm.value}"
        if self.scale_dtype is not ScaleDType.FLOAT32:
            text += f" {self.scale_dtype.value} scales"
        return text

    def group_for(self, k: int) -> int:
        return k if self.group_size == PER_CHANNEL else self.group_size


@dataclass(frozen=True)
class Override:
    """Modules whose name matches ``pattern`` (fnmatch, e.g. ``*.mlp.down_proj``) use ``quant``
    instead; ``quant=None`` keeps them in float."""

    pattern: str
    quant: WeightQuant | None

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise ValueError(f"an override needs a module name pattern such as '*.mlp.down_proj', got {self.pattern!r}")


@dataclass(frozen=True)
class QuantRecipe:
    """What every weight becomes.

    linear: the decoder's linears (None: keep float).
    embedding: the token embedding, weight-only 8w or 4w (None: keep float).
    output: the lm_head; None means automatic: a tied lm_head reads the quantized embedding table
        itself (one table in the file), otherwise it follows ``linear``. Use an override with
        pattern ``lm_head`` and quant None to keep it in float.
    overrides: applied in order, the last match wins.
    """

    linear: WeightQuant | None = None
    embedding: WeightQuant | None = None
    output: WeightQuant | None = None
    overrides: tuple[Override, ...] = field(default_factory=tuple)
    name: str = "custom"

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(self.overrides))
        if self.embedding is not None and self.embedding.scheme.dynamic_activations:
            raise ValueError(f"an embedding is a table lookup: its scheme must be weight-only ('8w' or '4w'), "
                             f"got {self.embedding.scheme.value!r}")
        if self.linear is None and self.embedding is None and self.output is None and not self.overrides:
            raise ValueError("the recipe quantizes nothing: set linear, embedding or output (e.g. --qlinear 8da4w)")

    def for_linear(self, name: str, *, is_output: bool, tied: bool) -> WeightQuant | None:
        """The quantization of linear ``name`` after overrides."""
        if is_output:
            if self.output is not None:
                quant = self.output
            elif tied and self.embedding is not None:
                quant = self.embedding.weight_only()
            else:
                quant = self.linear
        else:
            quant = self.linear
        return self._override(name, quant)

    def for_embedding(self, name: str) -> WeightQuant | None:
        return self._override(name, self.embedding)

    def _override(self, name: str, quant: WeightQuant | None) -> WeightQuant | None:
        for o in self.overrides:
            if fnmatch.fnmatchcase(name, o.pattern):
                quant = o.quant
        return quant

    def to_json(self) -> str:
        def plain(obj: Any) -> Any:
            if isinstance(obj, Enum):
                return obj.value
            if isinstance(obj, dict):
                return {k: plain(v) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return [plain(v) for v in obj]
            return obj

        return json.dumps(plain(asdict(self)), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "QuantRecipe":
        raw = json.loads(text)

        def wq(d: dict[str, Any] | None) -> WeightQuant | None:
            return None if d is None else WeightQuant(**d)

        return cls(linear=wq(raw.get("linear")), embedding=wq(raw.get("embedding")), output=wq(raw.get("output")),
                   overrides=tuple(Override(o["pattern"], wq(o["quant"])) for o in raw.get("overrides", ())),
                   name=raw.get("name", "custom"))

    def describe(self) -> str:
        parts = [f"linear {self.linear.describe() if self.linear else 'float'}",
                 f"embedding {self.embedding.describe() if self.embedding else 'float'}",
                 f"output {self.output.describe() if self.output else 'auto'}"]
        parts += [f"{o.pattern}: {o.quant.describe() if o.quant else 'float'}" for o in self.overrides]
        return f"{self.name} ({'; '.join(parts)})"
