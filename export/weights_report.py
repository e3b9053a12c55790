"""What the weights of a .ember file are stored as: every matrix with its bits per weight, and totals.

Read from the file alone (no metadata needed): the operands of each ``ember::quantized_*`` call
and each float ``linear`` / ``embedding`` weight. A table two ops read (a tied embedding and
lm_head) is listed once, marked shared. ``ember inspect`` prints it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ember.export.program import DTYPE_NAMES, Program, _human, _s, _seq
from ember.fb.InstructionKind import InstructionKind
from ember.fb.Storage import Storage
from ember.fb.ValueKind import ValueKind

__all__ = ["WeightRow", "weight_rows", "render_weights"]

QUANT_OPS = {"ember::quantized_linear.default": (1, 2, 3, 4, 6, 7), "ember::quantized_embedding.default": (0, 1, 2, 3, 5, 6)}
FLOAT_OPS = {"aten::linear.default": 1, "aten::embedding.default": 0}
_ELEMENT_BYTES = {0: 4, 1: 2, 2: 2, 3: 8, 4: 4, 5: 1, 6: 1, 7: 1}


@dataclass(frozen=True)
class WeightRow:
    name: str
    shape: tuple[int, int]  # [N, K] of the weight the codes stand for
    format: str  # e.g. "int4 g32 float16 scale +offset", "float32"
    bytes: int
    users: int  # ops reading it (2 for a tied table)

    @property
    def bits_per_weight(self) -> float:
        n, k = self.shape
        return self.bytes * 8 / max(n * k, 1)


def _tensor(m: Any, index: int) -> Any:
    if index < 0 or index >= len(_seq(m.values)):
        return None
    v = m.values[index]
    return v.v if v.vType == ValueKind.Tensor else None


def _int(m: Any, index: int) -> int:
    v = m.values[index]
    return int(v.v.v) if v.vType == ValueKind.Int else 0


def _nbytes(t: Any) -> int:
    n = 1
    for s in _seq(t.sizes):
        n *= int(s)
    return n * _ELEMENT_BYTES.get(t.dtype, 1)


def weight_rows(prog: Program, method: str = "forward") -> list[WeightRow]:
    m = next((m for m in _seq(prog.root.methods) if _s(m.name) == method), None)
    if m is None:
        return []
    rows: dict[Any, WeightRow] = {}
    for ins in _seq(m.instructions):
        if ins.iType == InstructionKind.DelegateCall:
            _add_delegate_weight(prog, m.delegates[ins.i.delegate], rows)
            continue
        if ins.iType != InstructionKind.KernelCall:
            continue
        op = _s(m.operators[ins.i.op].name)
        args = list(_seq(ins.i.args))
        if op in QUANT_OPS:
            iq, isc, izp, ioff, ibits, igroup = (args[i] for i in QUANT_OPS[op])
            qdata, scale = _tensor(m, iq), _tensor(m, isc)
            if qdata is None or scale is None or qdata.storage != Storage.Constant:
                continue
            zp, off = _tensor(m, izp), _tensor(m, ioff)
            bits, group = _int(m, ibits), _int(m, igroup)
            n, width = (int(s) for s in _seq(qdata.sizes))
            k = width * 2 if bits == 4 else width
            fmt = f"int{bits} {'per-channel' if group == k else f'g{group}'} {DTYPE_NAMES.get(scale.dtype)} scale"
            if zp is not None:
                fmt += f" +{DTYPE_NAMES.get(zp.dtype)} zero point"
            if off is not None:
                fmt += f" +{DTYPE_NAMES.get(off.dtype)} offset"
            size = sum(_nbytes(t) for t in (qdata, scale, zp, off) if t is not None)
            name = _s(qdata.name).removesuffix(".qdata").removesuffix(".parametrizations.weight.original0")
            key = (qdata.segment, int(qdata.offset))
        elif op in FLOAT_OPS:
            w = _tensor(m, args[FLOAT_OPS[op]]) if len(args) > FLOAT_OPS[op] else None
            if w is None or w.storage != Storage.Constant or len(_seq(w.sizes)) != 2:
                continue
            n, k = (int(s) for s in _seq(w.sizes))
            fmt, size, name = DTYPE_NAMES.get(w.dtype, "?"), _nbytes(w), _s(w.name)
            key = (w.segment, int(w.offset))
        else:
            continue
        if key in rows:
            old = rows[key]
            rows[key] = WeightRow(old.name, old.shape, old.format, old.bytes, old.users + 1)
        else:
            rows[key] = WeightRow(name or f"instruction {len(rows)}", (n, k), fmt, size, 1)
    return list(rows.values())


def _add_delegate_weight(prog: Program, d: Any, rows: dict[Any, WeightRow]) -> None:
    """The weight a delegate's blob holds, when its backend can describe it (one row per blob)."""
    from ember.export.backend import describe_blob

    key = ("delegate", int(d.segment))
    if key in rows:
        old = rows[key]
        rows[key] = WeightRow(old.name, old.shape, old.format, old.bytes, old.users + 1)
        return
    specs = {_s(kv.key): bytes(_seq(kv.value)) for kv in _seq(d.compileSpecs)}
    info = describe_blob(_s(d.backend), bytes(prog.segments[d.segment]), specs)
    if info is not None:
        rows[key] = WeightRow(info.name or f"{_s(d.backend)} blob {int(d.segment)}", info.shape, info.format, info.bytes, 1)


def render_weights(rows: list[WeightRow], constants_bytes: int, table: bool = True) -> list[str]:
    """The totals line, after one line per matrix when `table`."""
    if not rows:
        return []
    out = ["weights:"]
    width = max(len(r.name) for r in rows)
    for r in rows if table else ():
        shared = "  (shared by 2 ops)" if r.users > 1 else ""
        out.append(f"  {r.name:<{width}}  [{r.shape[0]}, {r.shape[1]}]  {r.format}  "
                   f"{r.bits_per_weight:.2f} bits/weight  {_human(r.bytes)}{shared}")
    params = sum(r.shape[0] * r.shape[1] for r in rows)
    total = sum(r.bytes for r in rows)
    out.append(f"  total: {len(rows)} matrices, {params / 1e6:.1f} M weights in {_human(total)} "
               f"({total * 8 / max(params, 1):.2f} bits/weight); other constants {_human(max(constants_bytes - total, 0))}")
    return out


def rows_as_dicts(rows: list[WeightRow]) -> list[dict[str, Any]]:
    return [{**asdict(r), "bits_per_weight": round(r.bits_per_weight, 3)} for r in rows]
