"""The C++ text runner on a tiny exported Llama: parity with HF greedy, chunked prefill, stop
conditions, stop() from another thread, callbacks, cache-prefix reuse and bad input."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from ember.runners import _runner
from ember.runtime.errors import EmberError, InvalidArgumentError

from tests.llm.tiny_models import make_tiny_model, reference_greedy

from .tiny_llm import MAX_CONTEXT_LEN, MAX_SEQ_LEN, tiny_llm_path

PROMPT = [1, 45, 88, 340, 263, 261, 86, 328, 76, 225, 89, 82, 77, 326, 87, 365, 93, 40, 41, 42]  # > max_seq_len


def gen_config(max_new_tokens=16, temperature=0.0, seed=0, stop_ids=(), ignore_eos=True, **sampling):
    c = _runner.GenerateConfig()
    c.max_new_tokens = max_new_tokens
    c.ignore_eos = ignore_eos
    c.stop_ids = list(stop_ids)
    s = c.sampling
    s.temperature = temperature
    s.seed = seed
    for k, v in sampling.items():
        setattr(s, k, v)
    c.sampling = s
    return c


@pytest.fixture(scope="module")
def greedy_ref():
    model, _ = make_tiny_model("llama")
    return reference_greedy(model, PROMPT, 12).tokens


@pytest.fixture
def runner(tiny_path):
    return _runner.Runner(str(tiny_path), 1)


def test_metadata_and_geometry(runner) -> None:
    assert runner.vocab_size == 384
    assert runner.max_seq_len == MAX_SEQ_LEN and runner.max_context_len == MAX_CONTEXT_LEN
    assert runner.metadata["llm.family"] == "llama"
    assert set(runner.eos_ids) == {2, 4}


def test_greedy_matches_hf_with_chunked_prefill(runner, greedy_ref) -> None:
    assert len(PROMPT) > MAX_SEQ_LEN
    tokens, reason = runner.generate(PROMPT, gen_config(max_new_tokens=12))
    assert tokens == greedy_ref
    assert reason == "max_tokens"
    s = runner.stats
    assert s["prompt_tokens"] == len(PROMPT) and s["prefill_tokens"] == len(PROMPT)
    assert s["generated_tokens"] == 12 and s["decode_steps"] == 11
    assert s["decode_tokens_per_s"] > 0 and s["prefill_tokens_per_s"] > 0 and s["peak_rss_bytes"] > 0
    assert s["time_to_first_token_ms"] > 0


def test_raw_forward_matches_the_runner(runner, greedy_ref) -> None:
    pos = 0
    for start in range(0, len(PROMPT), MAX_SEQ_LEN):
        chunk = PROMPT[start:start + MAX_SEQ_LEN]
        logits = runner.forward(chunk, pos)
        pos += len(chunk)
    assert logits.shape == (384,) and logits.dtype == np.float32
    assert int(np.argmax(logits)) == greedy_ref[0]


def test_step_api_yields_the_same_tokens(runner, greedy_ref) -> None:
    runner.start(PROMPT, gen_config(max_new_tokens=5))
    tokens = []
    while (t := runner.next()) is not None:
        tokens.append(t)
    assert tokens == greedy_ref[:5] and runner.stop_reason == "max_tokens"
    assert runner.next() is None


def test_context_end_stops_cleanly(runner) -> None:
    prompt = (PROMPT * 10)[: MAX_CONTEXT_LEN - 3]
    tokens, reason = runner.generate(prompt, gen_config(max_new_tokens=100))
    # 3 free positions: 3 tokens are fed, the 4th is sampled from the last position's logits.
    assert reason == "context_full" and len(tokens) == 4
    # A prompt that fills the context exactly still yields one token.
    tokens, reason = runner.generate((PROMPT * 10)[:MAX_CONTEXT_LEN], gen_config(max_new_tokens=100))
    assert (len(tokens), reason) == (1, "context_full")


SAMPLED = dict(temperature=1.0, seed=5)


def first_new_token(tokens):
    """The first index k >= 1 whose token did not occur before: stopping on it yields tokens[:k]."""
    return next(i for i in range(1, len(tokens)) if tokens[i] not in tokens[:i])


def test_stop_ids_end_generation_and_are_not_returned(runner) -> None:
    ref, _ = runner.generate(PROMPT, gen_config(12, **SAMPLED))
    k = first_new_token(ref)
    tokens, reason = runner.generate(PROMPT, gen_config(12, stop_ids=[ref[k]], **SAMPLED))
    assert tokens == ref[:k] and reason == "stop_token"


def test_eos_ends_generation(runner) -> None:
    ref, _ = runner.generate(PROMPT, gen_config(12, **SAMPLED))
    k = first_new_token(ref)
    eos_runner = _runner.Runner(str(tiny_llm_path(eos_token_id=ref[k])), 1)
    assert ref[k] in eos_runner.eos_ids
    tokens, reason = eos_runner.generate(PROMPT, gen_config(12, ignore_eos=False, **SAMPLED))
    assert tokens == ref[:k] and reason == "eos"
    tokens, reason = eos_runner.generate(PROMPT, gen_config(12, ignore_eos=True, **SAMPLED))
    assert tokens == ref and reason == "max_tokens"


def test_stop_from_another_thread(runner) -> None:
    started = threading.Event()
    seen = []

    def on_token(token):
        seen.append(token)
        if len(seen) == 3:
            started.set()
        time.sleep(0.002)  # releases the GIL; keeps the generation alive long enough
        return True

    result = {}
    worker = threading.Thread(target=lambda: result.update(out=runner.generate([1, 2, 3], gen_config(80), on_token)))
    worker.start()
    assert started.wait(10)
    runner.stop()
    worker.join(10)
    tokens, reason = result["out"]
    assert reason == "stopped" and 3 <= len(tokens) < 80


def test_callback_false_stops_and_exception_propagates(runner) -> None:
    seen = []
    tokens, reason = runner.generate(PROMPT, gen_config(20), lambda t: len(seen.append(t) or seen) < 4)
    assert (len(tokens), reason) == (4, "stopped")

    def boom(token):
        raise ZeroDivisionError("from the callback")

    with pytest.raises(ZeroDivisionError, match="from the callback"):
        runner.generate(PROMPT, gen_config(20), boom)
    assert runner.stop_reason == "stopped"
    # Still usable afterwards.
    assert len(runner.generate(PROMPT, gen_config(3))[0]) == 3


def test_sampled_generation_is_reproducible(runner) -> None:
    cfg = gen_config(20, temperature=1.0, seed=11, top_p=0.95)
    a = runner.generate(PROMPT, cfg)[0]
    runner.reset()
    b = runner.generate(PROMPT, cfg)[0]
    c = runner.generate(PROMPT, gen_config(20, temperature=1.0, seed=12, top_p=0.95))[0]
    assert a == b and a != c


def fresh(path, prompt, n):
    r = _runner.Runner(str(path), 1)
    return r.generate(prompt, gen_config(n))[0]


def test_prefix_reuse_gives_the_same_tokens_as_a_fresh_run(runner, tiny_path) -> None:
    first, _ = runner.generate(PROMPT, gen_config(6))
    assert runner.cached_tokens == PROMPT + first[:-1]  # the last sampled token is never fed
    follow = PROMPT + first + [50, 51, 52]
    second, _ = runner.generate(follow, gen_config(6))
    assert runner.stats["reused_tokens"] == len(PROMPT) + len(first) - 1
    assert runner.stats["prefill_tokens"] == 4
    assert second == fresh(tiny_path, follow, 6)

    # Divergence: roll back to the common prefix; stale positions are overwritten.
    diverged = PROMPT[:10] + [60, 61, 62, 63, 64]
    third, _ = runner.generate(diverged, gen_config(6))
    assert runner.stats["reused_tokens"] == 10
    assert third == fresh(tiny_path, diverged, 6)

    # The same prompt again recomputes only its last two tokens (test_prefix_reuse.py: why two).
    again, _ = runner.generate(diverged, gen_config(6))
    assert runner.stats["reused_tokens"] == len(diverged) - 2 and again == third

    runner.reset()
    assert runner.cached_tokens == []
    assert runner.generate(diverged, gen_config(6))[0] == third and runner.stats["reused_tokens"] == 0


@pytest.mark.parametrize("ahead", ["4", "1", "0"])
def test_a_step_started_ahead_is_cached_when_generation_stops_early(tiny_path, monkeypatch, ahead) -> None:
    """next() starts the returned token's step before returning (EMBER_STEP_AHEAD, 4 tokens ahead by
    default; the first token's at the following call); a generation stopped by its callback still
    completes that step, so the token is cached, and the tokens, the follow-up's reuse and its answer
    are those of a run without stepping ahead."""
    monkeypatch.setenv("EMBER_STEP_AHEAD", ahead)
    runner = _runner.Runner(str(tiny_path), 1)
    seen = []
    tokens, reason = runner.generate(PROMPT, gen_config(20), lambda t: len(seen.append(t) or seen) < 3)
    assert reason == "stopped" and tokens == fresh(tiny_path, PROMPT, 3)
    fed = tokens if ahead != "0" else tokens[:-1]
    assert runner.cached_tokens == PROMPT + fed
    follow = PROMPT + tokens + [50, 51]
    second, _ = runner.generate(follow, gen_config(5))
    assert runner.stats["reused_tokens"] == len(PROMPT) + len(fed)
    assert second == fresh(tiny_path, follow, 5)
    # stop() from the caller's side between tokens: the same bookkeeping.
    runner.start(PROMPT, gen_config(20))
    first = [runner.next(), runner.next()]
    runner.stop()
    assert runner.next() is None and runner.stop_reason == "stopped"
    assert runner.cached_tokens == PROMPT + (first if ahead != "0" else first[:1])


@pytest.mark.parametrize("ahead", ["4", "0"])
def test_the_first_tokens_step_starts_at_the_next_call(tiny_path, monkeypatch, ahead) -> None:
    """The first token comes back before its step starts (the caller streams it while no helper
    takes its core): stopped right after it, nothing was fed past the prompt, the follow-up reuses
    the prompt but its last token (the last two of a prompt are always prefilled), and the tokens are
    those of a plain run."""
    monkeypatch.setenv("EMBER_STEP_AHEAD", ahead)
    runner = _runner.Runner(str(tiny_path), 1)
    expected = fresh(tiny_path, PROMPT, 6)
    runner.start(PROMPT, gen_config(6))
    first = runner.next()
    time.sleep(0.2)  # a step started now would have finished
    runner.stop()
    assert runner.next() is None and runner.stop_reason == "stopped"
    assert first == expected[0] and runner.stats["decode_steps"] == 0
    assert runner.cached_tokens == PROMPT
    follow = PROMPT + [first]
    assert runner.generate(follow, gen_config(5))[0] == expected[1:]
    assert runner.stats["reused_tokens"] == len(PROMPT) - 1  # the last two tokens are always prefilled


@pytest.mark.parametrize("ahead", ["4", "2"])
def test_the_helper_runs_ahead_of_a_slow_caller(tiny_path, monkeypatch, ahead) -> None:
    """While the caller is busy, the helper samples up to EMBER_STEP_AHEAD tokens and runs their steps;
    next() hands them over in order (the tokens of a plain run). Stopped with tokens sampled ahead,
    those are dropped: the usage counts and cached_tokens hold only the tokens returned."""
    monkeypatch.setenv("EMBER_STEP_AHEAD", ahead)
    runner = _runner.Runner(str(tiny_path), 1)
    expected = fresh(tiny_path, PROMPT, 24)
    config = gen_config(24)
    runner.start(PROMPT, config)
    got = [runner.next()]
    time.sleep(0.5)  # the caller is slow: the helper goes on alone, `ahead` tokens at most
    while (token := runner.next()) is not None:
        got.append(token)
        time.sleep(0.01 if len(got) % 5 else 0.2)
    assert got == expected and runner.stats["generated_tokens"] == 24
    assert runner.stats["decode_steps"] == 23  # the last token is returned, never fed
    runner.start(PROMPT, config)
    got = [runner.next(), runner.next()]
    time.sleep(0.5)
    steps_before_stop = int(ahead) + 1 + 1  # the second token's step, `ahead` more, and the one running
    runner.stop()
    assert runner.next() is None and runner.stop_reason == "stopped"
    assert got == expected[:2] and runner.stats["generated_tokens"] == 2
    assert runner.cached_tokens == PROMPT + got
    assert runner.stats["decode_steps"] <= steps_before_stop
    # The next prompt reuses what was returned and answers as a fresh run does.
    follow = PROMPT + got + [7]
    assert runner.generate(follow, gen_config(6))[0] == fresh(tiny_path, follow, 6)
    assert runner.stats["reused_tokens"] == len(PROMPT) + 1  # all but the last two tokens


@pytest.mark.parametrize(
    "prompt, match",
    [([], "empty"), ([1, 384], "384 at index 1 is outside the vocabulary"), ([1, -3], "-3"),
     ([1] * (MAX_CONTEXT_LEN + 1), f"{MAX_CONTEXT_LEN + 1} tokens but the context holds {MAX_CONTEXT_LEN}")],
)
def test_bad_prompts_are_clear_errors(runner, prompt, match) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        runner.generate(prompt, gen_config(4))


def test_bad_config_and_forward_errors(runner) -> None:
    with pytest.raises(InvalidArgumentError, match="max_new_tokens"):
        runner.generate(PROMPT, gen_config(0))
    with pytest.raises(InvalidArgumentError, match="top_p"):
        runner.generate(PROMPT, gen_config(4, temperature=1.0, top_p=2.0))
    with pytest.raises(InvalidArgumentError, match="llm.max_seq_len"):
        runner.forward(list(range(MAX_SEQ_LEN + 1)), 0)
    with pytest.raises(InvalidArgumentError, match="outside the context"):
        runner.forward([1, 2], MAX_CONTEXT_LEN - 1)


def test_a_program_without_llm_metadata_is_rejected(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from tests.helpers import export
    from ember.export import lower

    class Plain(torch.nn.Module):
        def forward(self, x):
            return x + 1

    path = tmp_path / "plain.ember"
    lower(export(Plain(), (torch.zeros(2),))).save(str(path))
    with pytest.raises(InvalidArgumentError, match="not an LLM program.*llm.vocab_size.*export_llm"):
        _runner.Runner(str(path), 1)


def test_missing_file_is_an_io_error(tmp_path) -> None:
    with pytest.raises(EmberError):
        _runner.Runner(str(tmp_path / "nope.ember"), 1)


def test_sessions_stepping_ahead_with_random_stops_and_slow_callers(tiny_path) -> None:
    """4 sessions batched, each in its own thread, generate with random stops and random pauses between
    tokens (the helpers run ahead, fill their queues, are drained at a stop): every token is the one a
    fresh runner samples, and a stopped generation's usage and cached_tokens hold exactly what it returned
    (cached_tokens: not a first token alone, whose step had not started)."""
    config = lambda: gen_config(24, temperature=0.8, seed=3, top_k=50)  # noqa: E731
    prompts = [PROMPT[:5], PROMPT[:9], PROMPT[:14]]
    expected = {tuple(p): _runner.Runner(str(tiny_path), 2).generate(p, config())[0] for p in prompts}
    base = _runner.Runner(str(tiny_path), 2)
    sessions = [base] + [base.session() for _ in range(3)]
    failures: list = []

    def work(i: int) -> None:
        rnd = random.Random(i)
        s = sessions[i]
        for _ in range(40):
            prompt = rnd.choice(prompts)
            stop_at = rnd.choice([None, 1, 2, 5, 17])
            s.start(prompt, config())
            got = []
            while True:
                if len(got) == stop_at:
                    s.stop()
                token = s.next()
                if token is None:
                    break
                got.append(token)
                if rnd.random() < 0.2:
                    time.sleep(rnd.random() * 0.003)
            want = expected[tuple(prompt)][: 24 if stop_at is None else stop_at]
            fed = got if stop_at != 1 else []  # the first token's step starts at the second next()
            if got != want or s.stats["generated_tokens"] != len(got) or (
                    stop_at is not None and s.cached_tokens != prompt + fed):
                failures.append((i, prompt, stop_at, got, s.stats["generated_tokens"], len(s.cached_tokens)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads) and failures == []
