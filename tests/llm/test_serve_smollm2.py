"""`ember serve` with the real SmolLM2-135M-Instruct, through the official openai client: the
capital of France (streamed and not), a completion, models.list(), usage and finish reasons;
8 concurrent clients on 2 sessions answer exactly as each request run alone; the queue limit
gives 429; a client that disconnects mid-stream frees its session; SIGTERM with a request in
flight exits 0. Also: sessions in threads and their memory (RSS grows by KV + arena, not weights)."""

from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest

pytest.importorskip("starlette")
openai = pytest.importorskip("openai")
psutil = pytest.importorskip("psutil")

import ember  # noqa: E402

from .serve_helpers import start_cli_server, wait_until  # noqa: E402

pytestmark = pytest.mark.slow

MODEL = "smol"
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]
QUESTIONS = ["What is the capital of France?", "Name a primary color.", "What is 2 + 2?", "Say hello in Spanish.",
             "What do bees make?", "Name a planet.", "What is the opposite of hot?", "What color is the sky?"]


@pytest.fixture(scope="module")
def smol(smollm2_export):
    return smollm2_export[0]


@pytest.fixture(scope="module")
def server(smol):
    proc, url = start_cli_server(smol, "--sessions", "2", "--max-queue", "6", "--shutdown-timeout", "3")
    yield proc, url
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[1] + "/v1", api_key="unused", max_retries=0)


def health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=5).json()


def ask(client, question: str, max_tokens: int = 16) -> str:
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}],
                                           max_tokens=max_tokens, temperature=0)
    return reply.choices[0].message.content


def test_capital_of_france_streamed_and_not(client, smol) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=CAPITAL, max_tokens=32, temperature=0)
    text = reply.choices[0].message.content
    assert "Paris" in text
    assert reply.choices[0].finish_reason == "stop"  # ended at EOS, before max_tokens
    llm = ember.load(smol, mmap=True)
    assert reply.usage.prompt_tokens == len(llm.chat_ids(CAPITAL))
    assert 0 < reply.usage.completion_tokens < 32

    stream = client.chat.completions.create(model=MODEL, messages=CAPITAL, max_tokens=32, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


def test_completion_models_and_length_finish(client) -> None:
    done = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0)
    assert done.choices[0].finish_reason == "length" and done.usage.completion_tokens == 5
    assert "Paris" in done.choices[0].text
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_eight_concurrent_clients_on_two_sessions_match_runs_alone(server, client) -> None:
    alone = [ask(client, q) for q in QUESTIONS]
    together: list[str | None] = [None] * len(QUESTIONS)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(QUESTIONS))

    def run(i: int) -> None:
        try:
            barrier.wait()
            together[i] = ask(client, QUESTIONS[i])
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(QUESTIONS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert together == alone
    assert health(server[1])["busy"] == 0


def cancelled_total(url: str) -> int:
    metrics = httpx.get(url + "/metrics").text
    (line,) = [line for line in metrics.splitlines() if line.startswith("ember_requests_cancelled_total")]
    return int(float(line.split()[1]))


def test_queue_limit_429_and_disconnect_frees_the_session(server, client) -> None:
    url = server[1]
    holders = []
    # Hold both sessions with streams that run long (short answers could end at EOS before the
    # disconnect below, which then cancels nothing).
    for q in ("Write a long story about a dragon who learns to bake bread.", "Describe every planet of the solar system in detail."):
        cm = httpx.stream("POST", url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": q}], "max_tokens": 400, "stream": True,
            "stop": ["this will not occur"]})
        response = cm.__enter__()
        lines = response.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
        holders.append((cm, lines))
    assert health(url)["busy"] == 2
    waiting_results: list[int] = []
    waiting = [threading.Thread(target=lambda: waiting_results.append(httpx.post(
        url + "/v1/completions", timeout=120, json={"model": MODEL, "prompt": "Hi", "max_tokens": 2}).status_code))
        for _ in range(6)]
    for t in waiting:
        t.start()
    wait_until(lambda: health(url)["queued"] == 6, what="six queued requests")
    refused = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2})
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    with pytest.raises(openai.RateLimitError):
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    # Both clients go away mid-stream: their generations stop and the queue drains.
    cancelled_before = cancelled_total(url)  # the server is shared with the module's other tests
    for cm, _ in holders:
        cm.__exit__(None, None, None)
    for t in waiting:
        t.join(timeout=120)
    assert waiting_results == [200] * 6
    wait_until(lambda: health(url)["busy"] == 0, what="the sessions to be free")
    assert cancelled_total(url) - cancelled_before == 2
    assert ask(client, QUESTIONS[0], 8)  # the freed sessions serve again


def test_sigterm_with_a_request_in_flight_exits_0(server) -> None:
    proc, url = server
    with httpx.stream("POST", url + "/v1/completions", timeout=60, json={
            "model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "stream": True}) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # 3 s to finish, then cancelled at the next token


def test_sessions_in_threads_and_their_memory(smol) -> None:
    llm = ember.load(smol)  # weights read into private memory: RSS counts them once
    process = psutil.Process()
    questions = QUESTIONS[:4]
    sequential = [llm.chat([{"role": "user", "content": q}], max_new_tokens=16, temperature=0) for q in questions]
    rss_before = process.memory_info().rss
    sessions = [llm.session() for _ in range(3)]
    for s, q in zip(sessions, questions):
        s.chat([{"role": "user", "content": q}], max_new_tokens=16, temperature=0)
    grown = process.memory_info().rss - rss_before
    per_session = llm.state_bytes + llm.arena_bytes
    weights = os.path.getsize(smol)
    assert 3 * per_session + (32 << 20) < weights / 2  # so the bound below tells sessions from weight copies
    assert grown < 3 * per_session + (32 << 20), (grown, per_session, weights)

    results: list[str | None] = [None] * 4
    everyone = [llm] + sessions

    def run(i: int) -> None:
        results[i] = everyone[i].chat([{"role": "user", "content": questions[i]}], max_new_tokens=16, temperature=0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == sequential
