"""Batched decode: sessions of one model decoding at the same time share one pass over the
weights per step (Method::execute_batch through the runners' StepBatcher), with every session's
logits bit for bit what it gets alone. On the tiny Llama, fp32 (nothing stacks: per-session
execution in lockstep) and quantized on the CPU delegate (the linears run once over the stacked
rows): 8da4w (int8 activations) and q4 (fp32 activations, the block kernels)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import ember
from ember.llm.api import forward_batch
from ember.runtime.errors import InvalidArgumentError

from tests.runners.tiny_llm import tiny_llm_path

PROMPTS = ["It is a truth universally", "However little known the", "Café, naïve, 東京", "the rightful property",
           "must be in want of a wife", "surrounding families", "a single man", "possession of a good fortune"]


@pytest.fixture(scope="module", params=[None, "8da4w", "q4"], ids=["fp32", "8da4w", "q4"])
def path(request):
    return tiny_llm_path(quant=request.param)


def _token_streams(llm, n: int, steps: int) -> list[list[int]]:
    rng = np.random.default_rng(5)
    return [rng.integers(5, llm.vocab_size, steps).tolist() for _ in range(n)]


@pytest.mark.parametrize("batch", [2, 3, 5])
def test_forward_batch_gives_each_session_its_own_logits_bit_for_bit(path, batch: int) -> None:
    llm = ember.load(path, threads=2)
    sessions = [llm] + [llm.session() for _ in range(batch - 1)]
    steps = 12
    streams = _token_streams(llm, batch, steps)
    # Sessions start at different positions (each has its own cache slot and position).
    starts = [(3 * i) % 8 for i in range(batch)]  # prefix lengths within llm.max_seq_len (8)
    alone = []
    for i, s in enumerate(sessions):
        s.reset()
        if starts[i]:
            s.forward(streams[i][:1] * starts[i], 0)
        alone.append([s.forward([streams[i][t]], starts[i] + t).copy() for t in range(steps)])
    for i, s in enumerate(sessions):
        s.reset()
        if starts[i]:
            s.forward(streams[i][:1] * starts[i], 0)
    for t in range(steps):
        rows = forward_batch(sessions, [streams[i][t] for i in range(batch)], [starts[i] + t for i in range(batch)])
        for i in range(batch):
            assert np.array_equal(rows[i], alone[i][t]), (i, t, float(np.abs(rows[i] - alone[i][t]).max()))


@pytest.mark.parametrize("chunk", [2, 5, 8])
def test_a_prefill_chunk_shares_a_step_with_decodes_bit_for_bit(path, chunk: int) -> None:
    """A newcomer's prefill chunk and other sessions' decode steps in one execution (the batch is
    uneven: the longest first, each segment's sessions taken one at a time by a free thread): each
    session's logits are what it gets alone, step after step (the prefilled one then decodes on)."""
    llm = ember.load(path, threads=2)
    sessions = [llm] + [llm.session() for _ in range(3)]
    streams = _token_streams(llm, 4, 12)
    starts = [0, 3, 5, 1]  # session 0 prefills `chunk` tokens at position 0, the others decode
    alone = []
    for i, s in enumerate(sessions):
        s.reset()
        if i == 0:
            out = [s.forward(streams[0][:chunk], 0).copy()]
            out += [s.forward([streams[0][chunk + t]], chunk + t).copy() for t in range(3)]
        else:
            s.forward(streams[i][:1] * starts[i], 0)
            out = [s.forward([streams[i][t]], starts[i] + t).copy() for t in range(4)]
        alone.append(out)
    for i, s in enumerate(sessions):
        s.reset()
        if i:
            s.forward(streams[i][:1] * starts[i], 0)
    for t in range(4):
        tokens = [streams[0][:chunk] if t == 0 else streams[0][chunk + t - 1]] + [streams[i][t] for i in range(1, 4)]
        positions = [0 if t == 0 else chunk + t - 1] + [starts[i] + t for i in range(1, 4)]
        rows = forward_batch(sessions, tokens, positions)
        for i in range(4):
            assert np.array_equal(rows[i], alone[i][t]), (i, t, float(np.abs(rows[i] - alone[i][t]).max()))


def test_smollm2_batched_steps_past_the_attention_split_equal_each_session_alone(smollm2_export) -> None:
    """SmolLM2 (`8da4w`) at positions 100-111, where decode attention splits each session's cache into
    chunks for the threads (from ~29 keys; the tiny models never get there): a batched step's logits are
    the ones each session gets alone, though inside the step each session's attention runs as one pool
    task. Any rounding difference there would show: the int8 activations turn it into logit
    differences of ~1. Then two uneven steps, one session taking a 12-token chunk. (Native kernel
    level only: the forced-level reruns of the bit-for-bit tests would export SmolLM2 again per level.)"""
    path, _ = smollm2_export
    llm = ember.load(path, threads=2)
    sessions = [llm, llm.session(), llm.session()]
    rng = np.random.default_rng(7)
    prompts = [rng.integers(5, llm.vocab_size, 100 + 3 * i).tolist() for i in range(len(sessions))]
    steps = 12

    def prefill(i: int) -> None:
        sessions[i].reset()
        ids = prompts[i]
        for begin in range(0, len(ids), llm.max_seq_len):
            sessions[i].forward(ids[begin:begin + llm.max_seq_len], begin)

    streams = _token_streams(llm, len(sessions), steps)
    # Then two uneven steps: session 0 takes a 12-token chunk while the others decode (its pool tasks
    # run first and are taken by whichever thread is free).
    tails = [[rng.integers(5, llm.vocab_size, 12).tolist(), [int(x)]] for x in rng.integers(5, llm.vocab_size, 2)]
    tails = [[tails[j][0] if i == 0 else tails[j][1] for i in range(len(sessions))] for j in range(2)]

    def tail_positions(j: int) -> list[int]:
        return [len(prompts[i]) + steps + (12 * j if i == 0 else j) for i in range(len(sessions))]

    alone = []
    for i, s in enumerate(sessions):
        prefill(i)
        alone.append([s.forward([streams[i][t]], len(prompts[i]) + t).copy() for t in range(steps)])
        alone[i] += [s.forward(tails[j][i], tail_positions(j)[i]).copy() for j in range(2)]
    for i in range(len(sessions)):
        prefill(i)
    for t in range(steps + 2):
        if t < steps:
            rows = forward_batch(sessions, [streams[i][t] for i in range(len(sessions))],
                                 [len(prompts[i]) + t for i in range(len(sessions))])
        else:
            rows = forward_batch(sessions, tails[t - steps], tail_positions(t - steps))
        for i in range(len(sessions)):
            assert np.array_equal(rows[i], alone[i][t]), (i, t, float(np.abs(rows[i] - alone[i][t]).max()))


def _generate_in_threads(sessions, settings: dict) -> tuple[list[str], list[float]]:
    """Session i generates PROMPTS[i] in its own thread, all starting together: the answers and
    each session's stats.decode_batch_mean."""
    n = len(sessions)
    results: list[str | None] = [None] * n
    batch_means = [0.0] * n
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = sessions[i].generate(PROMPTS[i], **settings)
            batch_means[i] = sessions[i].stats.decode_batch_mean
        except BaseException as error:  # reported below, not lost on the thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results, batch_means


def test_sessions_in_threads_are_batched_and_match_sequential_runs(path) -> None:
    llm = ember.load(path, threads=2)
    n = 4
    settings = dict(max_new_tokens=48, temperature=0, ignore_eos=True)
    sequential = [llm.generate(p, **settings) for p in PROMPTS[:n]]
    llm.reset()
    sessions = [llm] + [llm.session() for _ in range(n - 1)]
    # Whether steps meet depends on how the OS schedules the threads: a tiny model's step takes
    # microseconds, and with the cores busy (pytest-xdist's other worker) one thread can run its
    # whole generation within its time slice while the others wait for the GIL. So this tries up
    # to 10 times: every try must match, and at least one must share steps.
    seen = []
    for _ in range(10):
        results, batch_means = _generate_in_threads(sessions, settings)
        assert results == sequential
        assert all(1.0 <= m <= n for m in batch_means), batch_means
        seen.append(batch_means)
        if max(batch_means) > 1.0:  # more than one session per decode step on average
            break
        for s in sessions:
            s.reset()
    assert max(max(m) for m in seen) > 1.0, seen


def test_a_session_alone_is_not_batched(path) -> None:
    llm = ember.load(path, threads=2)
    llm.session()  # an idle session never holds up the one that generates
    llm.generate(PROMPTS[0], max_new_tokens=8, temperature=0, ignore_eos=True)
    assert llm.stats.decode_batch_mean == 1.0


def test_forward_batch_bad_input() -> None:
    llm = ember.load(tiny_llm_path(), threads=2)
    other = llm.session()
    with pytest.raises(InvalidArgumentError, match="one token .or list of tokens. and one position per session"):
        forward_batch([llm, other], [5], [0, 0])
    with pytest.raises(InvalidArgumentError, match=r"tokens\[1\] is empty"):
        forward_batch([llm, other], [5, []], [0, 0])
    with pytest.raises(InvalidArgumentError, match=r"tokens\[1\]: item 1 is 2.5"):
        forward_batch([llm, other], [5, [6, 2.5]], [0, 0])
    with pytest.raises(InvalidArgumentError, match="max_seq_len|longer than"):
        forward_batch([llm, other], [5, [6] * (llm.max_seq_len + 1)], [0, 0])
    with pytest.raises(InvalidArgumentError, match="same one"):
        forward_batch([llm, llm], [5, 6], [0, 0])
    with pytest.raises(InvalidArgumentError, match="another program"):
        forward_batch([llm, ember.load(tiny_llm_path(), threads=2)], [5, 6], [0, 0])
    with pytest.raises(InvalidArgumentError, match="outside the vocabulary"):
        forward_batch([llm, other], [5, llm.vocab_size], [0, 0])
    with pytest.raises(InvalidArgumentError, match="outside the context"):
        forward_batch([llm, other], [5, 6], [0, llm.max_context_len])
    with pytest.raises(InvalidArgumentError, match="non-empty list"):
        forward_batch([], [], [])


def test_batching_can_be_turned_off(path, monkeypatch) -> None:
    # EMBER_BATCH_DECODE=0 (read when the model is loaded): sessions then run side by side, unbatched.
    monkeypatch.setenv("EMBER_BATCH_DECODE", "0")
    llm = ember.load(path, threads=2)
    other = llm.session()
    settings = dict(max_new_tokens=12, temperature=0, ignore_eos=True)
    expected = [llm.generate(p, **settings) for p in PROMPTS[:2]]
    results, batch_means = _generate_in_threads([llm, other], settings)
    assert results == expected
    assert batch_means == [1.0, 1.0]


_PROFILE_SCRIPT = """
import gc, sys
import ember
from ember.llm.api import forward_batch
llm = ember.load(sys.argv[1], threads=2)
sessions = [llm] + [llm.session() for _ in range(2)]
for t in range(6):
    forward_batch(sessions, [5 + t, 6 + t, 7 + t], [t, t, t])
del sessions, llm
gc.collect()  # each session's method prints its EMBER_PROFILE summary when it goes
"""


def test_ember_profile_reports_batched_steps(path) -> None:
    # EMBER_PROFILE covers batched steps too: each session's method counts the 6 steps of 3 methods,
    # its instructions (stacked calls as a share of the batch's call), and splits a step's wall time
    # into the stacked delegate calls (none on the fp32 file) and the per-method stretches.
    proc = subprocess.run([sys.executable, "-c", _PROFILE_SCRIPT, str(path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "EMBER_PROFILE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    batched = re.findall(r"batched: (\d+) steps, ([\d.]+) methods per step; per step ([\d.]+) ms: stacked delegate "
                         r"calls ([\d.]+) ms, per-method stretches ([\d.]+) ms, the rest (-?[\d.]+) ms", proc.stderr)
    assert len(batched) == 3, proc.stderr[-3000:]
    fp32 = path == tiny_llm_path(quant=None)  # no delegate: nothing stacks
    for steps, methods, step, stacked, stretches, rest in batched:
        step, stacked, stretches, rest = float(step), float(stacked), float(stretches), float(rest)
        assert int(steps) == 6 and float(methods) == 3.0
        assert step > 0 and stretches > 0 and abs(step - stacked - stretches - rest) < 0.01
        assert (stacked == 0) == fp32, proc.stderr[-3000:]
    # every session ran the method's instructions 6 times each (the per-operator rows count calls)
    calls = [int(c) for c in re.findall(r"s +[\d.]+% +(\d+) calls +aten::rms_norm", proc.stderr)]
    assert calls and all(c > 0 and c % 6 == 0 for c in calls), proc.stderr[-3000:]
    workers = [float(w) for w in re.findall(r"workers ran chunks ([\d.]+)% of the time", proc.stderr)]
    assert workers and all(0 <= w <= 100.5 for w in workers), proc.stderr[-3000:]
