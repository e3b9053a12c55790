"""`ember serve --ray`: the real SmolLM2-135M-Instruct as a Ray Serve deployment of 2 replicas on a
local Ray that the CLI starts on this machine, through Ray's HTTP proxy and the official openai
client: the capital of France (streamed and not, usage counted), models.list(), both replicas
answering, and SIGTERM draining and exiting 0 (slow; skips without the ray extra). Also the
CLI's checks of --ray / --replicas, which need no Ray."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from ember.cli import main
from ember.llm.serve.config import RayConfig
from ember.llm.serve.ray_deployment import REPLICA_HEADER

from .serve_helpers import start_cli_server

# Checked without importing ray (that takes seconds), before the fixtures export the model.
needs_ray = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("ray", "starlette", "openai")),
                               reason="needs the ray extra (pip install 'ember[ray]') and openai")

MODEL = "smol"
CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.parametrize("args, message", [
    (["--replicas", "2"], "--replicas 2 needs --ray"),
    (["--ray-address", "auto"], "--ray-address auto needs --ray"),
    (["--ray", "--replicas", "0"], "RayConfig.replicas must be an int in [1, 4096], got 0"),
    (["--ray", "--sessions", "0"], "ServeConfig.sessions must be an int in [1, 1024], got 0"),
])
def test_cli_refuses_bad_ray_flags(args, message, capsys) -> None:
    assert main(["serve", "missing.ember", *args]) == 2  # refused before Ray or the file is touched
    assert message in capsys.readouterr().err


def test_ray_config_validates() -> None:
    assert RayConfig() == RayConfig(replicas=1, address=None)
    for bad in ({"replicas": True}, {"replicas": 1.5}, {"address": ""}, {"address": 6379}):
        with pytest.raises(ValueError, match="RayConfig"):
            RayConfig(**bad)


@pytest.fixture(scope="module")
def server(smollm2_export):
    # One kernel thread per replica: two replicas reserve the 2 CPUs of a small CI machine.
    # --mmap: the replicas share the file's pages instead of a private copy each.
    proc, url = start_cli_server(smollm2_export[0], "--ray", "--replicas", "2", "--threads", "1", "--mmap",
                                 "--shutdown-timeout", "5", "--log-level", "warning", timeout=180)
    yield proc, url
    if proc.poll() is None:  # a failed test left it running: stop it (and the Ray it started)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server[1] + "/v1", api_key="unused", max_retries=0)


@pytest.mark.slow
@needs_ray
def test_capital_of_france_streamed_and_not(client) -> None:
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=CAPITAL, max_tokens=32,
                                                           temperature=0)
    assert raw.headers.get(REPLICA_HEADER)
    reply = raw.parse()
    text = reply.choices[0].message.content
    assert "Paris" in text
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens > 0 and 0 < reply.usage.completion_tokens < 32
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

    stream = client.chat.completions.create(model=MODEL, messages=CAPITAL, max_tokens=32, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert len(chunks) > 3  # token by token through Ray's proxy, not one buffered body
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.prompt_tokens == reply.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens


@pytest.mark.slow
@needs_ray
def test_models_list(client) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]


@pytest.mark.slow
@needs_ray
def test_both_replicas_answer(server, client) -> None:
    def replica(question: str) -> str:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": question}], max_tokens=8, temperature=0)
        assert raw.parse().choices[0].message.content
        return raw.headers[REPLICA_HEADER]

    # Requests at once: Ray sends each to the replica with fewer in flight, so both get some.
    seen: set[str] = set()
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            seen |= set(pool.map(replica, ["Name a planet.", "What is 2 + 2?", "Name a color.", "Say hi."]))
            if len(seen) == 2:
                break
    assert len(seen) == 2, seen
    health = httpx.get(server[1] + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["sessions"] == 1  # each replica: its own pool
    assert health.headers[REPLICA_HEADER] in seen


@pytest.mark.slow
@needs_ray
def test_sigterm_drains_and_exits_0(server) -> None:
    proc, _ = server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 0, proc.stdout.read()
