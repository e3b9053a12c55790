"""`ember inspect FILE`: what is inside a .ember program."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ember.export.program import Program, _human, _seq
from ember.export.weights_report import WeightRow, render_weights, rows_as_dicts, weight_rows

EVAL_PREFIX = "eval."  # quality results written by `ember eval --record`, shown in their own section


def describe(path: str) -> dict[str, Any]:
    import ember.runtime

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
    return {
        "file": path,
        "file_size": runtime.file_size,
        "format_version": f"{major}.{minor}",
        "metadata": metadata,
        "state": [{"name": (s.name.decode() if isinstance(s.name, bytes) else s.name),
                   "sizes": [int(x) for x in _seq(s.sizes)]} for s in _seq(prog.root.state)],
        "segments": {"count": len(seg_sizes), "total": sum(seg_sizes), "largest": max(seg_sizes, default=0)},
        "methods": {name: prog.method_stats(name) for name in prog.methods},
        "weights": rows_as_dicts(weight_rows(prog, prog.methods[0])) if prog.methods else [],
    }


def render(info: dict[str, Any]) -> str:
    out = [f"{info['file']}: ember program, format {info['format_version']}, {_human(info['file_size'])}"]
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
    if info["state"]:
        out.append("state:")
        for s in info["state"]:
            out.append(f"  {s['name']}: {s['sizes']}")
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
    out.extend(render_weights(rows, first["constants_bytes"] if first else 0))
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from ember.runtime.errors import EmberError
    from ember.runtime.file_check import check_program_path

    try:
        info = describe(check_program_path(args.file))
    except EmberError as exc:
        print(f"ember inspect: error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # the Python reader on a file the runtime accepted
        print(f"ember inspect: error: {args.file}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2, default=str) if args.json else render(info))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("inspect", help="show what is inside a .ember file",
                       description="Header, version, metadata, methods with their inputs/outputs and bounds, "
                                   "op histogram, delegated vs portable nodes, arena and segment sizes.")
    p.add_argument("file", help="path to a .ember program")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=run)
