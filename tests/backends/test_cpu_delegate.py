"""The CPU delegate (backends/cpu): packing, every kernel against the portable reference kernels,
the tied table stored once, every ISA level giving the same int results, and corrupted blobs.

The modules here call the canonical quantized ops on buffers (tests/runtime/test_quantized_kernels.py
builds them); each is lowered twice, with and without the delegate, and both files run on the
runtime.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ember.runtime
from ember.backends.cpu import CpuPartitioner, packing
from ember.export import lower
from ember.export.program import Program
from ember.export.quant_ops import dequantize_weight
from ember.export.weights_report import weight_rows
from tests.helpers import LOWERED_DIR_ENV, export, lowered_file
from tests.runtime.corrupt import bit_flips, byte_edits
from tests.runtime.test_quantized_kernels import QEmbedding, QLinears, magnitude, make_weight, rel_error

REPO = Path(__file__).resolve().parents[2]
ZP_KINDS = ("none", "int8", "float", "q4_1", "bcast_float")
SCALE_DTYPES = (torch.float16, torch.float32, torch.bfloat16)
TOL = 1e-5  # delegate vs portable kernel, relative to the output's magnitude


def _variants(K: int, seed: int, group_sizes: tuple[int, ...]) -> list[dict]:
    """bits x act_quant x zero-point kind, cycling group size, scale dtype, row count and bias."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, (bits, act, zp_kind) in enumerate(itertools.product((4, 8), (0, 1, 2), ZP_KINDS)):
        gs = group_sizes[i % len(group_sizes)]
        n = (1, 15, 16, 37, 100)[(i + seed) % 5]  # partial and whole blocks of 16 rows
        v = make_weight(gen, n, K, bits, gs, zp_kind, SCALE_DTYPES[(i + seed) % 3])
        v["act_quant"] = act
        v["bias"] = torch.randn(n, generator=gen) * 0.1 if i % 3 == 0 else None
        out.append(v)
    return out


def _lower_both(module: torch.nn.Module, args: tuple, tmp_path: Path, name: str):
    exported = functools.cache(lambda: export(module, args))  # on first use: never when both files are shared
    files = {}
    for kind, parts in (("portable", ()), ("cpu", (CpuPartitioner(),))):
        path = lowered_file(tmp_path / f"{name}-{kind}.ember",
                            lambda out, parts=parts: lower(exported(), partitioners=parts).save(out))
        files[kind] = (Program.load(path), ember.runtime.load(path))
    return files


# ---- packing ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits,zp_kind,scale_dtype,n", [
    (4, "none", torch.float16, 16), (4, "int8", torch.float32, 37), (4, "q4_1", torch.float16, 1),
    (8, "none", torch.bfloat16, 33), (8, "float", torch.float16, 16), (8, "bcast_float", torch.float32, 5),
])
@pytest.mark.parametrize("interleave", [True, False], ids=["interleaved", "codes-first"])
def test_pack_round_trips_the_canonical_weight(bits, zp_kind, scale_dtype, n, interleave):
    w = make_weight(torch.Generator().manual_seed(n), n, 96, bits, 32, zp_kind, scale_dtype)
    bias = torch.randn(n)
    blob = packing.pack(w["qdata"], w["scale"], w["zero_point"], w["offset"], bias, bits, 32, rowsum=n % 2 == 1,
                        interleave=interleave)
    assert len(blob) % 64 == 0
    p = packing.unpack(blob)
    assert torch.equal(p.qdata, w["qdata"]) and torch.equal(p.scale, w["scale"]) and torch.equal(p.bias, bias)
    for got, want in ((p.zero_point, w["zero_point"]), (p.offset, w["offset"])):
        assert (got is None) == (want is None)
        if want is not None:
            assert torch.equal(got.float(), want.float())
    ref = dequantize_weight(w["qdata"], w["scale"], w["zero_point"], w["offset"], bits, 32)
    back = dequantize_weight(p.qdata, p.scale, p.zero_point, p.offset, bits, 32)
    assert torch.equal(ref, back)


def test_pack_refuses_what_the_kernels_cannot_read():
    w = make_weight(torch.Generator().manual_seed(0), 4, 40, 4, 20, "none", torch.float32)
    assert "multiple of 8" in packing.unsupported_reason(4, 40, 20, 4, {"scale": w["scale"]})
    with pytest.raises(ValueError, match=r"cannot pack a \[4, 40\] weight .*multiple of 8"):
        packing.pack(w["qdata"], w["scale"], None, None, None, 4, 20)


# ---- kernels against the portable reference -------------------------------------------------------

# (K, x shape, group sizes): decode and prefill row counts (M = 1..9, crossing the 4-row passes; 2 to
# 4 rows: a batched decode step, which the 4-bit int kernels take over pre-broadcast activations; 16
# and 34 rows: float-activation linears take the dequantize-then-GEMM path, 6- and 14-row tiles with
# remainders, panels of 32 weight rows with a missing half), row lengths with one or many words per
# group, per-channel groups.
LINEAR_CASES = [
    (64, (1, 64), (32, 64, 8)),
    (96, (2, 3, 96), (32, 96, 16)),
    (576, (1, 576), (32, 64, 576)),
    (576, (1, 9, 576), (32, 192, 64)),
    (1536, (1, 1536), (32, 128, 1536)),
    (160, (7, 160), (32, 160, 40)),
    (160, (16, 160), (32, 160, 40)),
    (576, (2, 17, 576), (32, 64, 576)),
    (576, (4, 576), (32, 64, 576)),
    (160, (3, 160), (32, 160, 40)),
    (96, (2, 96), (32, 96, 16)),
]


@pytest.mark.parametrize("K,shape,sizes", LINEAR_CASES, ids=[f"K{k}-{'x'.join(map(str, s))}" for k, s, _ in LINEAR_CASES])
def test_delegate_linear_matches_portable_kernels(K, shape, sizes, tmp_path):
    gen = torch.Generator().manual_seed(K + len(shape))
    x = torch.randn(*shape, generator=gen) * 2
    variants = _variants(K, K + sum(shape), sizes)
    module = QLinears(variants)
    files = _lower_both(module, (x,), tmp_path, "linear")
    stats = files["cpu"][0].method_stats("forward")
    assert stats["delegated_nodes"] == {"ember.cpu": len(variants)}, stats
    assert "ember::quantized_linear.default" not in stats["ops"]
    portable, cpu = (files[k][1].run("forward", x) for k in ("portable", "cpu"))
    for p, c, ref, v in zip(portable, cpu, module(x), variants):
        what = f"bits={v['bits']} gs={v['group_size']} act={v['act_quant']} N={v['scale'].shape[0]} zp={v['zero_point'] is not None}"
        floor = magnitude(x, v)
        assert rel_error(c, torch.from_numpy(p), floor) <= TOL, what
        assert rel_error(c, ref, floor) <= (1e-4 if v["act_quant"] else 1e-5), what


@pytest.mark.parametrize("rows,n,K", [(13, 1500, 1536), (1, 16400, 64)])
def test_many_rows_over_many_blocks_matches_portable_on_any_thread_count(rows, n, K, tmp_path):
    """Linears over several tiles of rows split the blocks into one part per thread, each run in items
    (a span of blocks against one tile, or a few blocks against every tile) that a thread done with
    its own part takes from another's: 1,500 weight rows (94 blocks, spans of blocks too) x 13 rows
    (three tiles and a remainder), on one thread and on all, give the same bits and the portable
    kernel's values. One row (decode) runs that way over the largest weights (1,025 blocks here, an
    lm_head's 3,072 in SmolLM2)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, rows, K, generator=gen)
    variants = []
    for bits, act in ((4, 1), (4, 2), (4, 0), (8, 1)):
        v = make_weight(gen, n, K, bits, 32, "none" if act else "float", torch.float16)
        variants.append({**v, "act_quant": act, "bias": None})
    module = QLinears(variants)
    files = _lower_both(module, (x,), tmp_path, f"many-rows-{rows}")
    threads = ember.runtime.get_num_threads()
    try:
        ember.runtime.set_num_threads(1)
        one = files["cpu"][1].run("forward", x)
    finally:
        ember.runtime.set_num_threads(threads)
    every = files["cpu"][1].run("forward", x)
    portable = files["portable"][1].run("forward", x)
    for a, b, p, v in zip(one, every, portable, variants):
        assert np.array_equal(a, b), f"bits={v['bits']} act={v['act_quant']}: 1 thread and {threads} differ"
        assert rel_error(torch.from_numpy(b), torch.from_numpy(p), magnitude(x, v)) <= TOL


@pytest.mark.parametrize("rows", [2, 3, 4, 5, 8, 9, 17, 18, 19])
def test_pairs_and_quads_of_4bit_blocks_give_the_single_block_bits(rows, tmp_path):
    """From the level's pair_min_rows rows on (2 on Intel, 17 on AMD from Zen 5), 4-bit int linears run
    two blocks at once where the level has the kernel (AVX-512 VNNI); fewer rows run single blocks. On
    AMD from Zen 5, over more than 4 rows, the tiles after the first run four blocks at once (int4_quad),
    in items of whole quads: the zero point folded (504 rows, symmetric, per token) or the general group
    step (per-group activations, offsets).
    Odd and even block counts, a partial last block inside a pair (20, 120, 504 rows) or alone (37),
    tiles of 4 rows with a remainder of one to three rows (5, 9, 17, 18, 19: items of 2 blocks per
    thread, of whole quads on Zen 5), per-token and per-group activations,
    symmetric and asymmetric weights.
    Each row's results are the bits it gets alone (one row runs single blocks) and the portable
    kernel's values."""
    gen = torch.Generator().manual_seed(17 + rows)
    x = torch.randn(1, rows, 160, generator=gen)
    variants = []
    cases = ((20, 1, "none"), (120, 2, "none"), (37, 1, "q4_1"), (120, 1, "float"), (600, 2, "none"), (504, 1, "none"))
    for n, act, zp_kind in cases:
        v = make_weight(gen, n, 160, 4, 32, zp_kind, torch.float16)
        variants.append({**v, "act_quant": act, "bias": torch.randn(n, generator=gen) * 0.1 if n == 37 else None})
    module = QLinears(variants)
    files = _lower_both(module, (x,), tmp_path, f"pairs-{rows}")
    one_row = _lower_both(module, (x[:, :1],), tmp_path, f"pairs-{rows}-one")["cpu"][1]
    together = files["cpu"][1].run("forward", x)
    alone = [one_row.run("forward", x[:, m:m + 1].contiguous()) for m in range(rows)]
    portable = files["portable"][1].run("forward", x)
    for i, (t, p, v) in enumerate(zip(together, portable, variants)):
        for m in range(rows):
            assert np.array_equal(t[0, m], alone[m][i][0, 0]), f"variant {i}, row {m}: differs from the row alone"
        assert rel_error(torch.from_numpy(t), torch.from_numpy(p), magnitude(x, v)) <= TOL, f"variant {i}"


PACK = packing.pack


@pytest.mark.parametrize("rows", [1, 3, 20])  # decode, a batched step, prefill (the GEMM path for fp32 activations)
def test_blobs_in_the_codes_first_layout_give_the_same_bits(rows, tmp_path, monkeypatch):
    """Files written before the interleaved layout (flag bit 2 clear: every group's codes, then the
    parameters) still load and compute exactly what the interleaved blobs do."""
    K = 576
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(1, rows, K, generator=gen)
    module = QLinears(_variants(K, rows, (32, 64, 576)))
    exported = functools.cache(lambda: export(module, (x,)))
    outs = {}
    for interleave in (True, False):
        monkeypatch.setattr(packing, "pack", functools.partial(PACK, interleave=interleave))
        path = lowered_file(tmp_path / f"layout-{interleave}.ember",
                            lambda out: lower(exported(), partitioners=(CpuPartitioner(),)).save(out))
        data = path.read_bytes()
        flags = struct.unpack_from("<I", data, _blob_region(data)[0] + 32)[0]  # the ECW1 header's flags
        assert bool(flags & packing.FLAG_INTERLEAVED) == interleave
        outs[interleave] = ember.runtime.load(path).run("forward", x)
    for a, b in zip(outs[True], outs[False]):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("act_quant,rows", [(1, 3), (0, 3), (0, 20)])  # 20 rows: the GEMM path
def test_delegate_nan_rows_stay_nan_and_other_rows_are_unaffected(act_quant, rows, tmp_path):
    x = torch.randn(rows, 64)
    x[1, 5] = float("nan")
    v = make_weight(torch.Generator().manual_seed(1), 20, 64, 4, 32, "none", torch.float16)
    v.update(act_quant=act_quant, bias=None)
    files = _lower_both(QLinears([v]), (x,), tmp_path, "nan")
    (p,), (c,) = (files[k][1].run("forward", x) for k in ("portable", "cpu"))
    assert np.isnan(c[1]).all() and np.isnan(p[1]).all()
    others = [r for r in range(rows) if r != 1]
    assert rel_error(c[others], torch.from_numpy(p[others])) <= TOL


class TiedTable(torch.nn.Module):
    """An embedding and an lm_head reading the same quantized table."""

    def __init__(self, w: dict, act_quant: int):
        super().__init__()
        for key in ("qdata", "scale", "zero_point", "offset"):
            self.register_buffer(key, w[key])
        self.bits, self.gs, self.act = w["bits"], w["group_size"], act_quant

    def forward(self, tokens):
        h = torch.ops.ember.quantized_embedding(self.qdata, self.scale, self.zero_point, self.offset, tokens,
                                                self.bits, self.gs, torch.float32)
        return torch.ops.ember.quantized_linear(torch.tanh(h), self.qdata, self.scale, self.zero_point, self.offset,
                                                None, self.bits, self.gs, self.act)


@pytest.mark.parametrize("bits,zp_kind", [(4, "none"), (8, "int8"), (4, "q4_1")])
def test_tied_table_is_stored_once_and_gathers_exactly(bits, zp_kind, tmp_path):
    w = make_weight(torch.Generator().manual_seed(bits), 300, 128, bits, 32, zp_kind, torch.float16)
    module = TiedTable(w, act_quant=1)
    tokens = torch.tensor([[0, 299, 17, 17, 160]])
    files = _lower_both(module, (tokens,), tmp_path, "tied")
    program = files["cpu"][0]
    method = program.root.methods[0]
    assert len(method.delegates) == 2 and method.delegates[0].segment == method.delegates[1].segment
    table_bytes = w["qdata"].numel() + w["scale"].numel() * 2
    assert program.size < 1.3 * table_bytes + 16384, "the table must be stored once"
    (p,), (c,) = (files[k][1].run("forward", tokens) for k in ("portable", "cpu"))
    assert rel_error(c, torch.from_numpy(p)) <= 1e-4
    # ember inspect lists the packed table once, read by both ops, with its format and size.
    (row,) = weight_rows(program)
    assert row.shape == (300, 128) and row.users == 2 and "packed for ember.cpu" in row.format
    assert row.format.startswith(f"int{bits} g32 float16 scale") and row.bytes == len(program.segments[method.delegates[0].segment])


@pytest.mark.parametrize("bits,zp_kind", [(4, "none"), (4, "q4_1"), (8, "float"), (8, "int8")])
def test_delegate_embedding_equals_portable_bit_for_bit(bits, zp_kind, tmp_path):
    w = make_weight(torch.Generator().manual_seed(3), 50, 96, bits, 32, zp_kind, torch.float16)
    idx = torch.tensor([[0, 49, 3, 3, 17, 48]])
    files = _lower_both(QEmbedding(w, torch.float32), (idx,), tmp_path, "emb")
    assert files["cpu"][0].method_stats("forward")["delegated_nodes"] == {"ember.cpu": 1}
    (p,), (c,) = (files[k][1].run("forward", idx) for k in ("portable", "cpu"))
    assert np.array_equal(p, c)
    with pytest.raises(ember.runtime.InvalidArgumentError, match="index 50 .*out of range.*50 rows"):
        files["cpu"][1].run("forward", torch.tensor([[1, 50, 2, 2, 2, 2]]))


# ---- ISA levels ------------------------------------------------------------------------------------

_LEVELS = ["portable", "avx2", "avx512", "avx512vnni", "amx"]


def _supported_levels() -> list[str]:
    best = ember.runtime.cpu_info()["best_isa"]
    return _LEVELS[: _LEVELS.index(best) + 1]


_RUN_LEVEL = """
import json, sys, numpy as np, ember.runtime as r
prog = r.load(sys.argv[1]); x = np.load(sys.argv[2])
outs = prog.run("forward", x)
info = r.cpu_info()["kernels"]
print(json.dumps({"paths": {k: v for k, v in info.items() if k.startswith("cpu.")},
                  "outs": [o.tobytes().hex() for o in outs]}))
"""


@pytest.mark.parametrize("K,rows", [(192, 5), (192, 37), (44, 5)])
def test_every_isa_level_gives_the_same_int_results(K, rows, tmp_path):
    """The activation quantizers give the same codes and the int kernels sum exactly and apply the
    per-group step in one order on every SIMD level: outputs are bit-identical across AVX2, AVX-512,
    AVX-512 VNNI and AMX (and close on portable). K = 44 (8-bit, per channel) leaves vector tails;
    37 rows run as two 16-row tiles (AMX's kernels, where the CPU has them) and 5 rows in 4-row tiles."""
    levels = _supported_levels()
    if len(levels) < 2:
        pytest.skip("this CPU has only the portable level")
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(1, rows, K, generator=gen)
    if K == 192:
        variants = [v for v in _variants(192, 5, (32, 64, 192)) if v["act_quant"]]
        x[0, 1] = torch.arange(K) % 32 - 15.5  # with 127 opening each group (d = 1): x / d ties at .5
        x[0, 1, ::32] = 127.0
    else:
        variants = []
        for act, zp_kind in itertools.product((1, 2), ("none", "float")):
            v = make_weight(gen, 19, K, 8, K, zp_kind, torch.float16)
            variants.append({**v, "act_quant": act, "bias": None})
    program = lower(export(QLinears(variants), (x,)), partitioners=(CpuPartitioner(),))
    path = tmp_path / "levels.ember"
    program.save(path)
    np.save(tmp_path / "x.npy", x.numpy())
    results = {}
    for level in levels:
        env = {**os.environ, "EMBER_KERNEL_ISA": level}
        proc = subprocess.run([sys.executable, "-c", _RUN_LEVEL, str(path), str(tmp_path / "x.npy")], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[level] = json.loads(proc.stdout.strip().splitlines()[-1])
        paths = results[level]["paths"]
        assert paths["cpu.linear_int8_activations"] == ("avx512vnni" if level == "amx" else level), paths
        assert paths["cpu.linear_int8_row_tiles"] == level, paths
    simd = [lv for lv in levels if lv != "portable"]
    for lv in simd[1:]:
        assert results[lv]["outs"] == results[simd[0]]["outs"], f"{lv} differs from {simd[0]}"
    ref = [np.frombuffer(bytes.fromhex(h), dtype=np.float32) for h in results["portable"]["outs"]]
    for lv in simd:
        for r, h in zip(ref, results[lv]["outs"]):
            got = np.frombuffer(bytes.fromhex(h), dtype=np.float32)
            assert np.abs(got - r).max() <= 1e-5 * max(np.abs(r).max(), 1.0)


def test_delegate_kernels_on_forced_isa_levels(tmp_path):
    """This file's kernel tests and the batched decode's bit-for-bit test (the kernels over stacked
    rows), rerun on every lower level the CPU has, all levels on the same files (lowered_file)."""
    batched = str(REPO / "tests" / "llm" / "test_batched_decode.py")
    env = {**os.environ, LOWERED_DIR_ENV: str(tmp_path / "lowered")}
    for level in _supported_levels()[:-1]:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, batched, "-k",
             "(matches_portable or bit_for_bit or tied_table or layout) and not fp32"],
            capture_output=True, text=True, cwd=REPO, env={**env, "EMBER_KERNEL_ISA": level}, timeout=900)
        assert proc.returncode == 0 and " passed" in proc.stdout, level + proc.stdout[-3000:] + proc.stderr[-2000:]


# ---- corrupted blobs ---------------------------------------------------------------------------------

def _blob_region(data: bytes) -> tuple[int, int]:
    """File offsets [start, end) of the first delegate's blob."""
    program = Program.from_buffer(data)
    seg = program.root.segments[program.root.methods[0].delegates[0].segment]
    data_offset = struct.unpack_from("<Q", data, 32)[0]
    return data_offset + seg.offset, data_offset + seg.offset + seg.size


def _header_edits(data: bytes, region: tuple[int, int], rng: random.Random) -> list[bytes]:
    """Every header field of the blob set to boundary and random values."""
    start = region[0]
    fields = [(4 + 4 * i, "I") for i in range(9)] + [(40, "q"), (48, "q")]  # flags (36) included
    out = []
    for off, kind in fields:
        for val in (0, 1, 2, 3, 7, 255, 2**31 - 1, 2**32 - 1, rng.randrange(2**16)):
            b = bytearray(data)
            struct.pack_into("<" + kind, b, start + off, val if kind == "I" else val - (2**31 if val >= 2**31 else 0))
            out.append(bytes(b))
    return out


def test_corrupted_delegate_blobs_give_clean_errors(tmp_path):
    from tests.runtime.test_corrupted_files import _installed_tool, _run_tool

    w = make_weight(torch.Generator().manual_seed(2), 40, 64, 4, 32, "int8", torch.float16)
    w.update(act_quant=1, bias=torch.randn(40))
    data = lower(export(QLinears([w]), (torch.randn(1, 64),)), partitioners=(CpuPartitioner(),)).to_bytes()
    region = _blob_region(data)
    assert data[region[0]: region[0] + 4] == b"ECW1"
    rng = random.Random(0)
    header = (region[0], region[0] + 64)
    items = (_header_edits(data, region, rng) + bit_flips(data, 150, rng, header) + byte_edits(data, 150, rng, header)
             + bit_flips(data, 100, rng, region) + [data[: region[1] - k] for k in (1, 64, 200)])
    files = []
    for i, blob in enumerate(items):
        f = tmp_path / f"c{i:04d}.ember"
        f.write_bytes(blob)
        files.append(f)
    lines = _run_tool(_installed_tool(), files)
    assert all(line == "ok" or line.startswith("error: [") for line in lines)
    assert sum(line.startswith("error") for line in lines) > len(lines) // 3
