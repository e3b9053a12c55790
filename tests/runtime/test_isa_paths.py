"""The kernel ISA layer: what `ember.runtime.cpu_info()` reports, forced levels (EMBER_KERNEL_ISA)
running the math-heavy kernel tests, and forced levels the CPU lacks being refused.

The level is chosen once per process, so each forced level runs in a subprocess of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ember.runtime
from tests.helpers import LOWERED_DIR_ENV

REPO = Path(__file__).resolve().parents[2]
LEVELS = ["portable", "avx2", "avx512", "avx512vnni", "amx"]
F32_FAMILIES = {"f32.dot", "f32.axpy", "f32.gemv", "f32.gemv_short_rows", "f32.gemv_cached_rows", "f32.gemm_ukernel",
                "f32.softmax", "f32.silu", "f32.weighted_rows_sum", "f32.half_to_float", "f32.scaled_i8_to_float",
                "f32.i8_scores", "f32.i8_weighted_rows", "f32.argmax"}
# Families whose best version is AVX2 (conversions): at the AVX-512 levels they stay on it.
AVX2_TOP = {"f32.half_to_float", "f32.scaled_i8_to_float"}
Q_FAMILIES = {"q.linear_weight_only", "q.linear_int8_activations", "q.embedding"}
CPU_DELEGATE_FAMILIES = {"cpu.linear_int8_activations", "cpu.linear_float_activations", "cpu.activation_quant",
                         "cpu.dequantize_for_gemm", "cpu.embedding", "cpu.linear_int8_row_tiles"}


def _info_with(isa: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "EMBER_KERNEL_ISA"}
    if isa is not None:
        env["EMBER_KERNEL_ISA"] = isa
    code = "import json, ember.runtime as r; print(json.dumps(r.cpu_info()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _supported() -> list[str]:
    best = ember.runtime.cpu_info()["best_isa"]  # what the CPU has, whatever EMBER_KERNEL_ISA says
    return LEVELS[: LEVELS.index(best) + 1]


def test_cpu_info_reports_features_and_every_kernel_family() -> None:
    info = _info_with(None)
    assert info["isa"] == info["best_isa"] and info["isa_error"] is None
    vendors = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    vendor_ids = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("vendor_id")]
    families = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("cpu family")]
    if vendor_ids:  # CPUID's vendor string, as the kernel reads it
        assert info["vendor"] == vendors.get(vendor_ids[0], "other"), (info["vendor"], vendor_ids[0])
    else:
        assert info["vendor"] in {"intel", "amd", "other"}
    if families and info["vendor"] != "other":  # the display family, as the kernel computes it
        assert info["family"] == int(families[0]), (info["family"], families[0])
    assert set(info["kernels"]) == F32_FAMILIES | Q_FAMILIES | CPU_DELEGATE_FAMILIES
    f = info["features"]
    if f["avx512f"] and f["avx512bw"] and f["avx512vl"] and f["fma"]:
        # amx_* are true only where the OS also granted the tile state; builds whose compiler lacks
        # AMX stop at avx512vnni.
        vnni = ["avx512vnni", "amx"] if f["amx_tile"] and f["amx_int8"] else ["avx512vnni"]
        assert info["best_isa"] in (vnni if f["avx512_vnni"] else ["avx512"])
    elif f["avx2"] and f["fma"]:
        assert info["best_isa"] == "avx2"
    else:
        assert info["best_isa"] == "portable"
    if info["best_isa"] != "portable":  # no fp32 or delegate linear entry is left on the portable path
        assert all(info["kernels"][k] != "portable" for k in F32_FAMILIES), info["kernels"]
        # amx: the single-row and 4-row int kernels stay on VNNI; prefill's 16-row tiles use AMX.
        int_level = "avx512vnni" if info["best_isa"] == "amx" else info["best_isa"]
        assert info["kernels"]["cpu.linear_int8_activations"] == int_level, info["kernels"]
        assert info["kernels"]["cpu.linear_int8_row_tiles"] == info["best_isa"], info["kernels"]
        assert info["kernels"]["cpu.activation_quant"] != "portable", info["kernels"]
    assert ember.runtime.cpu_info()["best_isa"] == info["best_isa"]  # in-process, unforced


@pytest.mark.parametrize("isa", LEVELS)
def test_forced_level_is_used_by_every_family(isa: str) -> None:
    if isa not in _supported():
        pytest.skip(f"this CPU cannot run {isa} kernels")
    info = _info_with(isa)
    assert info["isa"] == isa and info["isa_error"] is None
    order = LEVELS.index
    assert all(order(level) <= order(isa) for level in info["kernels"].values()), info["kernels"]
    if isa == "portable":
        assert set(info["kernels"].values()) == {"portable"}


@pytest.mark.parametrize("value", ["avx512", "avx512vnni", "amx", "sse9", "AVX2"])
def test_a_level_the_cpu_lacks_or_an_unknown_name_is_refused(value: str, tmp_path: Path) -> None:
    if value in _supported():
        pytest.skip(f"this CPU runs {value} kernels")
    env = {**os.environ, "EMBER_KERNEL_ISA": value}
    code = ("import sys, ember.runtime as r\n"
            "info = r.cpu_info(); print(info['isa_error'])\n"
            "try:\n    r.load(sys.argv[1])\nexcept r.InvalidArgumentError as e:\n    print('REFUSED', e)\n")
    bogus = tmp_path / "any.ember"
    bogus.write_bytes(b"not a program")  # refused before the file is even read
    proc = subprocess.run([sys.executable, "-c", code, str(bogus)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"EMBER_KERNEL_ISA={value}" in proc.stdout and "REFUSED" in proc.stdout
    assert "portable" in proc.stdout.split("REFUSED")[1]  # names the levels that would work


_RUN_KERNEL_TESTS_AT = """
import json, sys
import pytest
import ember.runtime as r
code = pytest.main(sys.argv[2:])
info = r.cpu_info()  # the tables the kernels just ran with, asked in the same process
print("EMBER_KERNELS_USED " + json.dumps({"isa": info["isa"], "kernels": info["kernels"]}))
sys.exit(code)
"""


@pytest.fixture(scope="module")
def lowered_dir(tmp_path_factory) -> Path:
    """The files the first level's run lowers, which the other levels' runs load (tests.helpers.to_ember)."""
    return tmp_path_factory.mktemp("lowered")


@pytest.mark.parametrize("isa", ["portable", "avx2", "avx512"])
def test_kernels_on_forced_isa(isa: str, lowered_dir: Path) -> None:
    """The math-heavy kernel tests pass with every kernel family on the forced level, and the
    process that ran them reports each family's table at that level (not merely the variable set).
    Every level runs the same files."""
    if isa not in _supported():
        pytest.skip(f"this CPU cannot run {isa} kernels")
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_KERNEL_TESTS_AT, "-", "-q", "-p", "no:cacheprovider",
         str(REPO / "tests/runtime/test_kernels.py"), str(REPO / "tests/runtime/test_quantized_kernels.py"),
         str(REPO / "tests/runtime/test_kv_cache_kernels.py"), str(REPO / "tests/runners/test_sampler.py"),
         "-k", "linear or attend or sdpa or softmax or silu or norm or matmul or quantized or greedy"],
        capture_output=True, text=True, cwd=REPO, timeout=600,
        env={**os.environ, "EMBER_KERNEL_ISA": isa, LOWERED_DIR_ENV: str(lowered_dir)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
    used = json.loads(proc.stdout.split("EMBER_KERNELS_USED ", 1)[1].splitlines()[0])
    assert used["isa"] == isa
    order = LEVELS.index
    assert all(order(level) <= order(isa) for level in used["kernels"].values()), used["kernels"]
    if isa == "portable":
        assert set(used["kernels"].values()) == {"portable"}
    else:  # the fp32 families with a version at this level must be on it (conversions top out at AVX2)
        assert all(used["kernels"][family] == isa for family in F32_FAMILIES
                   if family not in AVX2_TOP or isa == "avx2"), used["kernels"]
