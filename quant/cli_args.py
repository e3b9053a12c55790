"""``ember export`` quantization flags -> a QuantRecipe (optimum-executorch's flag names).

    --quant q4                                     a preset (or 'gguf': keep a GGUF's own blocks)
    --qlinear 8da4w --qlinear-group-size 32        the linears
    --qembedding 8w                                the embedding
    --qoutput 8w                                   the lm_head
    --qoverride 'model.layers.0.*=8w'              per-module overrides (repeatable)

Flags refine a preset when both are given. Pure Python (no torch).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from .presets import GGUF, get_preset, preset_names
from .recipe import GROUP_SIZES, PER_CHANNEL, Algorithm, LinearActivations, Mapping, Override, QuantRecipe, ScaleDType, Scheme, WeightQuant

__all__ = ["add_quant_arguments", "recipe_from_args", "parse_override"]

_SCHEMES = [s.value for s in Scheme]


def add_quant_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "quantization", "weights become int8/int4 through torchao (default: none, full precision). A preset, or "
        "--qlinear/--qembedding/--qoutput for a custom recipe (flags refine a preset when both are given).")
    g.add_argument("--quant", metavar="PRESET",
                   help=f"one of {preset_names()}: q8 int8 per channel (near lossless); q4 int4 g32 with float "
                        "offsets + int8 embedding/lm_head (~5 bits per weight); 8da4w int8 dynamic activations x "
                        "int4 g32 weights; gguf keeps a .gguf source's own quantized blocks exactly")
    g.add_argument("--qlinear", choices=_SCHEMES, help="scheme of the decoder's linear layers")
    g.add_argument("--qlinear-group-size", type=int, metavar="N",
                   help=f"weights per scale: one of {list(GROUP_SIZES)}, or {PER_CHANNEL} for per channel (default 32)")
    g.add_argument("--qlinear-mapping", choices=[m.value for m in Mapping],
                   help="sym: w = q*s; asym: integer zero point; asym-float: the group's min/max with a float "
                        "offset (GGUF Q4_1 style) (default sym)")
    g.add_argument("--qlinear-algorithm", choices=[a.value for a in Algorithm],
                   help="how torchao picks scales: affine (min/max) or hqq (symmetric only) (default affine)")
    g.add_argument("--qscale-dtype", choices=[d.value for d in ScaleDType],
                   help="dtype of stored scales and offsets (default float32; float16 saves 2 bytes per group)")
    g.add_argument("--qembedding", choices=["8w", "4w"], help="scheme of the token embedding")
    g.add_argument("--qembedding-group-size", type=int, metavar="N",
                   help="weights per scale for the embedding table (default 32, with float16 scales unless "
                        "--qscale-dtype says otherwise: GGUF's Q8_0 grid; a tied lm_head reads the same table)")
    g.add_argument("--qoutput", choices=_SCHEMES,
                   help="scheme of the output layer (default: a tied lm_head reads the quantized embedding table, "
                        "otherwise it follows --qlinear)")
    g.add_argument("--qoutput-group-size", type=int, metavar="N", help="weights per scale for the output layer")
    g.add_argument("--qactivations", choices=[a.value for a in LinearActivations], default="float",
                   help="what the weight-only quantized linears (4w/8w, the q4/q8 presets, a tied lm_head, every "
                        "--quant gguf block) multiply: 'float' activations, exact (default), or 'int8': quantized "
                        "per group of the weight's group size, as llama.cpp does for its Q4_0/Q4_1/K-quant dot "
                        "products (about 1.5x faster decode on the CPU delegate, a small quality cost: check it "
                        "with ember eval)")
    g.add_argument("--qoverride", action="append", default=[], metavar="PATTERN=SCHEME[:GROUP]",
                   help="modules matching PATTERN (fnmatch on module names, e.g. '*.mlp.down_proj') use SCHEME "
                        "(e.g. 8w, 4w:64) or 'float'; repeatable, the last match wins")


def parse_override(text: str, linear: WeightQuant | None) -> Override:
    """'PATTERN=SCHEME[:GROUP]' or 'PATTERN=float'; other settings follow the linear scheme."""
    pattern, sep, spec = text.partition("=")
    if not sep or not pattern or not spec:
        raise ValueError(f"--qoverride {text!r} must look like 'PATTERN=SCHEME[:GROUP]' (e.g. '*.down_proj=8w:32') "
                         "or 'PATTERN=float'")
    if spec == "float":
        return Override(pattern, None)
    scheme, _, group = spec.partition(":")
    base = linear or WeightQuant(Scheme.W8)
    try:
        group_size = int(group) if group else base.group_size
    except ValueError:
        raise ValueError(f"--qoverride {text!r}: group {group!r} is not an integer") from None
    return Override(pattern, replace(base, scheme=Scheme(scheme) if scheme in _SCHEMES else scheme, group_size=group_size))


def recipe_from_args(args: Any) -> QuantRecipe | str | None:
    """None (no quantization), 'gguf', or the recipe the flags describe."""
    recipe = _recipe_from_args(args)
    if recipe is None and getattr(args, "qactivations", "float") != LinearActivations.FLOAT.value:
        raise ValueError(f"--qactivations {args.qactivations} applies to quantized linears; add a quantization "
                         "(e.g. --quant gguf or --quant q4)")
    return recipe


def _recipe_from_args(args: Any) -> QuantRecipe | str | None:
    custom = any(getattr(args, k) is not None for k in (
        "qlinear", "qlinear_group_size", "qlinear_mapping", "qlinear_algorithm", "qscale_dtype", "qembedding",
        "qembedding_group_size", "qoutput", "qoutput_group_size")) or bool(args.qoverride)
    if args.quant == GGUF:
        if custom:
            raise ValueError("--quant gguf keeps the GGUF's own blocks; it cannot be combined with --qlinear, "
                             "--qembedding, --qoutput or --qoverride")
        return GGUF
    base = get_preset(args.quant) if args.quant else None
    if not custom:
        return base
    linear = base.linear if base else None
    if args.qlinear or linear is not None:
        linear = _refine(linear, args.qlinear, args.qlinear_group_size, args.qlinear_mapping,
                         args.qlinear_algorithm, args.qscale_dtype)
    elif any(v is not None for v in (args.qlinear_group_size, args.qlinear_mapping, args.qlinear_algorithm)):
        raise ValueError("--qlinear-group-size/--qlinear-mapping/--qlinear-algorithm need --qlinear (e.g. --qlinear 8da4w)")
    embedding = base.embedding if base else None
    if args.qembedding or embedding is not None:
        default = embedding or WeightQuant(Scheme.W8, 32, scale_dtype=ScaleDType.FLOAT16)
        embedding = _refine(default, args.qembedding, args.qembedding_group_size, None, None, args.qscale_dtype)
    elif args.qembedding_group_size is not None:
        raise ValueError("--qembedding-group-size needs --qembedding (e.g. --qembedding 8w)")
    output = base.output if base else None
    if args.qoutput:
        output = _refine(output or linear, args.qoutput, args.qoutput_group_size, None, None, args.qscale_dtype)
    elif args.qoutput_group_size is not None:
        raise ValueError("--qoutput-group-size needs --qoutput (e.g. --qoutput 8w)")
    overrides = (base.overrides if base else ()) + tuple(parse_override(o, linear) for o in args.qoverride)
    name = f"{base.name}+custom" if base else "custom"
    return QuantRecipe(linear=linear, embedding=embedding, output=output, overrides=overrides, name=name)


def _refine(base: WeightQuant | None, scheme: str | None, group: int | None, mapping: str | None,
            algorithm: str | None, scale_dtype: str | None) -> WeightQuant:
    if base is None:
        base = WeightQuant(Scheme(scheme) if scheme else Scheme.W8)
    changes: dict[str, Any] = {}
    for key, value in (("scheme", scheme), ("group_size", group), ("mapping", mapping), ("algorithm", algorithm),
                       ("scale_dtype", scale_dtype)):
        if value is not None:
            changes[key] = value
    return replace(base, **changes)
