"""`ember inspect FILE`: what is inside a .ember program."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ember.cli import fail

# The file readers (flatbuffers, which imports numpy) are imported by the functions that use them:
# `ember` registers this command in every CLI process, `ember bench` included.

EVAL_PREFIX = "eval."  # quality results written by `ember eval --record`, shown in their own section


def describe(path: str) -> dict[str, Any]:
    import ember.runtime
    from ember.export.program import Program, _human
    from ember.export.weights_report import rows_as_dicts, weight_rows

    prog = Program.load(path)
    runtime = ember.runtime.load(path)  # also proves the runtime accepts the file
    major, minor = runtime.format_version
    seg_sizes = [len(memoryview(s).cast("B")) for s in prog.segments]
    metadata = {}
    for k, v in prog.metadata.items():
        if isinstance(v, bytes):
            metadata[k] = f"<{_human(len(v))} of bytes>"
        elif isinstance(v, str) and len(v) > 120:
            metadata[k] = v[:117].replace("\n", "\\n") + "..."
        else:
            metadata[k] = v
    weights = rows_as_dicts(weight_rows(prog, prog.methods[0])) if prog.methods else []
    return {
        "file": path,
        "model": model_facts(prog.metadata, weights),
        "file_size": runtime.file_size,
        "format_version": f"{major}.{minor}",
        "metadata": metadata,
        "state": [{"name": t.name, "dtype": t.dtype, "sizes": list(t.shape), "bytes": t.nbytes}
                  for t in prog.state_tensors()],
        "segments": {"count": len(seg_sizes), "total": sum(seg_sizes), "largest": max(seg_sizes, default=0)},
        "methods": {name: prog.method_stats(name) for name in prog.methods},
        "weights": weights,
    }


def model_facts(metadata: dict[str, Any], weights: list[dict[str, Any]]) -> dict[str, Any]:
    """The LLM's shape from its llm.* metadata (empty for a program that is not an LLM).
    Files exported before llm.n_params existed report the weights of their matrices instead."""
    if "llm.vocab_size" not in metadata:
        return {}
    facts: dict[str, Any] = {key: metadata[f"llm.{key}"] for key in (
        "family", "n_params", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size",
        "max_context_len", "max_seq_len", "logits", "rope_type", "rope_theta") if f"llm.{key}" in metadata}
    if "n_params" not in facts and weights:
        facts["n_matrix_weights"] = sum(w["shape"][0] * w["shape"][1] for w in weights)
    windows = [w for w in metadata.get("llm.sliding_windows", []) if w]
    if windows:
        facts["sliding_window_layers"] = len(windows)
        facts["sliding_window"] = max(windows)
    for key in ("export.dtype", "quant.recipe"):
        if key in metadata:
            facts[key.split(".")[1]] = metadata[key]
    return facts


def _model_lines(m: dict[str, Any]) -> list[str]:
    if not m:
        return []
    if "n_params" in m:
        params = f"{m['n_params'] / 1e6:.1f} M parameters"
    elif "n_matrix_weights" in m:
        params = f"{m['n_matrix_weights'] / 1e6:.1f} M weights in matrices"
    else:
        params = None
    heads = f"{m['n_heads']} heads" if "n_heads" in m else None
    if "n_kv_heads" in m:
        kv = f"{m['n_kv_heads']} KV heads" + (f", head dim {m['head_dim']}" if "head_dim" in m else "")
        heads = f"{heads} ({kv})" if heads else kv
    parts = [m.get("family", "?"), params, f"{m['n_layers']} layers" if "n_layers" in m else None,
             f"hidden {m['hidden_size']}" if "hidden_size" in m else None, heads, f"vocab {m['vocab_size']}"]
    out = ["model: " + ", ".join(p for p in parts if p)]
    recipe = m.get("recipe")
    dtype = m.get("dtype", "?") + (f", quantized: {recipe}" if recipe not in (None, "none", "float") else "")
    out.append(f"  weights {dtype}; context {m.get('max_context_len', '?')} tokens, prefill chunks of "
               f"{m.get('max_seq_len', '?')}, logits: {m.get('logits', '?')}")
    rope = []
    if "rope_type" in m:
        rope.append(f"rope {m['rope_type']}" + (f", theta {m['rope_theta']:g}" if "rope_theta" in m else ""))
    if "sliding_window" in m:
        rope.append(f"sliding window {m['sliding_window']} on {m['sliding_window_layers']} of "
                    f"{m.get('n_layers', '?')} layers")
    if rope:
        out.append("  " + "; ".join(rope))
    return out


def render(info: dict[str, Any], tensors: bool = False) -> str:
    from ember.export.program import _human
    from ember.export.state_summary import StateTensor, state_lines
    from ember.export.weights_report import WeightRow, render_weights

    out = [f"{info['file']}: ember program, format {info['format_version']}, {_human(info['file_size'])}"]
    out.extend(_model_lines(info["model"]))
    seg = info["segments"]
    out.append(f"segments: {seg['count']} ({_human(seg['total'])}, largest {_human(seg['largest'])})")
    out.append("metadata:")
    for k, v in sorted(info["metadata"].items()):
        if not k.startswith(EVAL_PREFIX):
            out.append(f"  {k} = {v}")
    evals = {k[len(EVAL_PREFIX):]: v for k, v in info["metadata"].items() if k.startswith(EVAL_PREFIX)}
    if evals:
        out.append("eval (recorded by `ember eval --record`):")
        width = max(len(k) for k in evals)
        for k, v in sorted(evals.items()):
            out.append(f"  {k:<{width}}  {f'{v:.6g}' if isinstance(v, float) else v}")
    out.extend(state_lines([StateTensor(s["name"], s["dtype"], tuple(s["sizes"])) for s in info["state"]], _human))
    for name, m in info["methods"].items():
        out.append(f"method {name}:")
        out.append(f"  inputs:  {', '.join(m['inputs'])}")
        out.append(f"  outputs: {', '.join(m['outputs'])}")
        ratio = m["arena_size"] / m["activation_bytes"] * 100 if m["activation_bytes"] else 0
        out.append(f"  arena: {_human(m['arena_size'])} (activations before sharing: "
                   f"{_human(m['activation_bytes'])}, {ratio:.0f}%); constants: {_human(m['constants_bytes'])}")
        out.append(f"  instructions: {m['instructions']}; portable kernel calls: {m['portable_nodes']}")
        for backend, n in m["delegated_nodes"].items():
            out.append(f"  delegated to {backend}: {n} nodes")
        out.append("  ops:")
        for op, n in m["ops"].items():
            out.append(f"    {n:5d}  {op}")
    rows = [WeightRow(w["name"], tuple(w["shape"]), w["format"], w["bytes"], w["users"]) for w in info["weights"]]
    first = next(iter(info["methods"].values()), None)
    out.extend(render_weights(rows, first["constants_bytes"] if first else 0, table=tensors))
    if rows and not tensors:
        out.append("  (--tensors lists every matrix with its format and bits per weight)")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from ember.runtime.errors import EmberError
    from ember.runtime.file_check import check_program_path

    try:
        info = describe(check_program_path(args.file))
    except EmberError as exc:
        return fail("inspect", exc, 1)
    except (OSError, ValueError) as exc:  # the Python reader on a file the runtime accepted
        return fail("inspect", f"{args.file}: {exc}", 1)
    print(json.dumps(info, indent=2, default=str) if args.json else render(info, tensors=args.tensors))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show what is inside a .ember file",
                       description="Header, version, the model (parameters, layers, hidden size, heads, rope), "
                                   "metadata, the KV cache, methods with their inputs/outputs and bounds, op "
                                   "histogram, delegated vs portable nodes, arena and segment sizes, weight totals "
                                   "(--tensors: every matrix).")
    p.add_argument("file", help="path to a .ember program")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON (every tensor included)")
    p.add_argument("--tensors", action="store_true",
                   help="list every weight matrix with its shape, format and bits per weight")
    p.set_defaults(func=run)
