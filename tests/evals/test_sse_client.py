"""evals/sse_client.py, the benchmark's lean streaming client, against a real `ember serve` app: the
events it hands over are the server's chunks (the same text as a plain request's answer), an error
status raises with the status, and one keep-alive connection carries several requests."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")

from ember.llm.serve import ServeConfig, create_app  # noqa: E402

from tests.llm.serve_helpers import ServerThread  # noqa: E402
from tests.runners.tiny_llm import tiny_llm_path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "evals"))
from sse_client import HTTPStatusError, SSEConnection  # noqa: E402


def test_sse_client_streams_answers_and_reports_errors_over_one_connection() -> None:
    app = create_app(ServeConfig(path=str(tiny_llm_path()), model_name="tiny", sessions=1, threads=1))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6,
            "temperature": 0}
    with ServerThread(app) as server:
        plain = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60).json()

        async def run() -> tuple[list[list[dict]], int, str]:
            connection = SSEConnection("127.0.0.1", server.port)
            answers: list[list[dict]] = []
            try:
                for _ in range(2):  # the second request reuses the connection
                    events: list[dict] = []
                    await connection.post_stream("/v1/chat/completions", {
                        **body, "stream": True, "stream_options": {"include_usage": True}}, events.append)
                    answers.append(events)
                with pytest.raises(HTTPStatusError) as error:
                    await connection.post_stream("/v1/chat/completions", {**body, "model": "other"}, answers.append)
                return answers, error.value.status, str(error.value)
            finally:
                await connection.close()

        answers, status, message = asyncio.run(run())
    assert status == 400 and "other" in message  # an unknown model: the server's error JSON, quoted
    expected = plain["choices"][0]["message"]["content"]
    for events in answers:
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        assert text == expected
        assert events[-1]["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]
        assert events[-2]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
