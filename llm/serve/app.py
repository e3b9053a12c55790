"""The OpenAI-compatible ASGI app (Starlette) over a pool of sessions of one model.

Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models (these need the bearer
key when one is set), GET /health, GET /metrics (Prometheus text). Every error is OpenAI's error
JSON with a 4xx/5xx status: never a traceback or a dropped connection.

A request is validated and tokenized on the event loop, then waits for a session (429 at once
when the wait queue is full) and generates on a worker thread (one per session). A client that
goes away stops its generation at the next token, which frees the session.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ember.llm.chat_template import ChatTemplateError
from ember.llm.serve.config import ServeConfig
from ember.llm.serve.errors import APIError, bad_request
from ember.llm.serve.generation import Finished, Generation, finish_reason
from ember.llm.serve.metrics import Metrics
from ember.llm.serve.pool import PoolClosed, QueueFull, SessionPool, Slot
from ember.llm.serve.protocol import ChatRequest, CompletionRequest, Sampling, parse_chat, parse_completion
from ember.runtime.errors import EmberError, InvalidArgumentError

__all__ = ["create_app"]

log = logging.getLogger("ember.serve")


class _ClientGone(Exception):
    """The client disconnected before its answer was ready."""


class _Server:
    def __init__(self, config: ServeConfig, llm: Any | None) -> None:
        from ember.llm.api import load

        self.config = config
        self.llm = llm if llm is not None else load(config.path, threads=config.threads, mmap=config.mmap)
        _ = self.llm.tokenizer  # fail at start, not on the first request, when the file has none
        sessions = [self.llm] + [self.llm.session() for _ in range(config.sessions - 1)]
        self.pool = SessionPool(sessions, config.max_queue)
        self.executor = ThreadPoolExecutor(max_workers=config.sessions, thread_name_prefix="ember-session")
        self.metrics = Metrics()
        self.created = int(time.time())
        self.running: set[Generation] = set()

    # --- request plumbing -------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise APIError(401, "missing API key: send the header 'Authorization: Bearer <key>'",
                           code="invalid_api_key")
        if not hmac.compare_digest(given.strip().encode(), key.encode()):
            raise APIError(401, "incorrect API key", code="invalid_api_key")

    @staticmethod
    async def json_body(request: Request) -> Any:
        raw = await request.body()
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise bad_request(f"the request body is not valid JSON: {error}", code="invalid_json") from None

    def check_context(self, ids: list[int]) -> None:
        limit = self.llm.max_context_len
        if len(ids) >= limit:
            raise bad_request(
                f"this model's maximum context length is {limit} tokens; the prompt has {len(ids)} tokens and "
                "needs room for at least one more: shorten it", param="messages", code="context_length_exceeded")

    def generation_config(self, sampling: Sampling, prompt_len: int) -> Any:
        try:
            return self.llm.config(
                None,
                max_new_tokens=sampling.max_tokens or max(1, self.llm.max_context_len - prompt_len),
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                seed=sampling.seed,
                stop=sampling.stop or None,
                frequency_penalty=sampling.frequency_penalty,
                presence_penalty=sampling.presence_penalty,
            )
        except ValueError as error:
            raise bad_request(str(error)) from None

    async def until_gone(self, request: Request, on_gone: Callable[[], None]) -> None:
        """Calls on_gone() when the client disconnects (run as a task; cancel it when done)."""
        while not await request.is_disconnected():
            await asyncio.sleep(0.05)
        on_gone()

    async def acquire(self, request: Request, ids: list[int]) -> Slot:
        task = asyncio.ensure_future(self.pool.acquire(ids))
        watcher = asyncio.ensure_future(self.until_gone(request, task.cancel))
        try:
            return await task
        except QueueFull:
            raise APIError(429, f"all {self.pool.size} sessions are busy and {self.config.max_queue} requests "
                                "are already waiting; retry later", type="rate_limit_error",
                           code="queue_full") from None
        except PoolClosed:
            raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down") from None
        except asyncio.CancelledError:
            if watcher.done():
                raise _ClientGone() from None
            raise
        finally:
            watcher.cancel()

    def start(self, slot: Slot, ids: list[int], config: Any) -> Generation:
        def done() -> None:
            self.running.discard(generation)
            self.pool.release(slot)

        generation = Generation(slot.llm, ids, config, on_done=done)
        self.running.add(generation)
        generation.start(self.executor)
        return generation

    def cancelled(self, generation: Generation) -> None:
        if generation.cancel():
            self.metrics.cancelled += 1

    # --- endpoints ----------------------------------------------------------------------------
    async def handle(self, request: Request, endpoint: str, chat: bool) -> Response:
        t0 = time.perf_counter()
        status = 200
        try:
            self.authorize(request)
            body = await self.json_body(request)
            req: ChatRequest | CompletionRequest = (parse_chat if chat else parse_completion)(
                body, self.config.model_name)
            ids = self.prompt_ids(req)
            self.check_context(ids)
            config = self.generation_config(req.sampling, len(ids))
            slot = await self.acquire(request, ids)
            generation = self.start(slot, ids, config)
            answer = _Answer(chat, self.config.model_name, len(ids))
            if req.stream:
                return _EventStream(self.stream(generation, answer, req.include_usage, t0),
                                    on_close=lambda: self.cancelled(generation))
            return JSONResponse(await self.collect(request, generation, answer, t0))
        except (APIError, InvalidArgumentError) as error:
            api_error = _as_api_error(error)
            status = api_error.status
            return JSONResponse(api_error.body(), status_code=api_error.status)
        except _ClientGone:
            status = 499  # nginx's "client closed request": nobody reads this answer
            return Response(status_code=499)
        except Exception:  # a bug: logged here, answered as OpenAI's server_error
            log.exception("request to %s failed", endpoint)
            status = 500
            return JSONResponse(APIError(500, "internal server error (see the server log)", type="server_error").body(),
                                status_code=500)
        finally:
            self.metrics.request(endpoint, status)

    def prompt_ids(self, req: ChatRequest | CompletionRequest) -> list[int]:
        try:
            if isinstance(req, ChatRequest):
                return self.llm.chat_ids(list(req.messages))
            return self.llm.encode(req.prompt if isinstance(req.prompt, str) else list(req.prompt))
        except (EmberError, ChatTemplateError) as error:
            param = "messages" if isinstance(req, ChatRequest) else "prompt"
            raise bad_request(str(error), param=param) from None

    async def collect(self, request: Request, generation: Generation, answer: "_Answer", t0: float) -> dict:
        watcher = asyncio.ensure_future(self.until_gone(request, lambda: self.cancelled(generation)))
        try:
            pieces: list[str] = []
            async for event in generation.events():
                if isinstance(event, Finished):
                    self.finished(event, answer, t0 if not pieces else None)
                    return answer.whole("".join(pieces), event)
                if not pieces:
                    self.metrics.time_to_first_token(time.perf_counter() - t0)
                pieces.append(event)
            raise RuntimeError("generation ended without a result")
        finally:
            watcher.cancel()

    def finished(self, event: Finished, answer: "_Answer", ttft_from: float | None) -> None:
        if ttft_from is not None:  # no text at all: the first (empty) answer is the first token
            self.metrics.time_to_first_token(time.perf_counter() - ttft_from)
        self.metrics.generation(event.stats, answer.prompt_tokens)

    async def stream(self, generation: Generation, answer: "_Answer", include_usage: bool, t0: float
                     ) -> AsyncIterator[str]:
        yield _sse(answer.chunk(role=True, include_usage=include_usage))
        head, tail = answer.text_event_parts(include_usage)
        first = True
        try:
            async for event in generation.events():
                if isinstance(event, Finished):
                    self.finished(event, answer, t0 if first else None)
                    yield _sse(answer.chunk(finish=finish_reason(event.stats.stop_reason),
                                            include_usage=include_usage))
                    if include_usage:
                        yield _sse(answer.usage_chunk(event))
                    break
                if first:
                    self.metrics.time_to_first_token(time.perf_counter() - t0)
                    first = False
                yield head + json.dumps(event, ensure_ascii=False) + tail
        except Exception as error:  # headers are sent: the error travels as an event (as OpenAI's does)
            log.exception("streamed generation failed")
            yield _sse(_as_api_error(error).body())
        yield "data: [DONE]\n\n"

    async def models(self, request: Request) -> Response:
        try:
            self.authorize(request)
        except APIError as error:
            self.metrics.request("/v1/models", error.status)
            return JSONResponse(error.body(), status_code=error.status)
        self.metrics.request("/v1/models", 200)
        return JSONResponse({"object": "list", "data": [self.model_card()]})

    def model_card(self) -> dict:
        return {"id": self.config.model_name, "object": "model", "created": self.created, "owned_by": "ember",
                "max_context_len": self.llm.max_context_len}

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": self.config.model_name, "sessions": self.pool.size,
                             "busy": self.pool.busy, "queued": self.pool.queue_depth})

    async def metrics_text(self, request: Request) -> Response:
        gauges = {
            "sessions": ("Sessions (conversations generated at once).", lambda: self.pool.size),
            "sessions_busy": ("Sessions generating now.", lambda: self.pool.busy),
            "queue_depth": ("Requests waiting for a session.", lambda: self.pool.queue_depth),
        }
        return PlainTextResponse(self.metrics.render(gauges), media_type="text/plain; version=0.0.4")

    def shutdown(self) -> None:
        self.pool.close()
        for generation in list(self.running):
            self.cancelled(generation)
        self.executor.shutdown(wait=True)  # each worker ends at its next token


class _Answer:
    """Builds one request's OpenAI response objects (chat or text completion)."""

    def __init__(self, chat: bool, model: str, prompt_tokens: int) -> None:
        self.chat = chat
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def _usage(self, event: Finished) -> dict:
        completion = int(event.stats.generated_tokens)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}

    def whole(self, text: str, event: Finished) -> dict:
        reason = finish_reason(event.stats.stop_reason)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice], "usage": self._usage(event)}

    def chunk(self, text: str = "", role: bool = False, finish: str | None = None, include_usage: bool = False) -> dict:
        if self.chat:
            delta: dict = {}
            if role:
                delta = {"role": "assistant", "content": ""}
            elif text:
                delta = {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        out = {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
               "created": self.created, "model": self.model, "choices": [choice]}
        if include_usage:
            out["usage"] = None
        return out

    def text_event_parts(self, include_usage: bool) -> tuple[str, str]:
        """What comes before and after the JSON string of a streamed text piece in its SSE event
        (`_sse(chunk(text=...))`): per piece, only the text is serialized."""
        marker = "\0"  # serialized as "\u0000", which nothing else in a chunk contains
        head, tail = _sse(self.chunk(text=marker, include_usage=include_usage)).split(json.dumps(marker))
        return head, tail

    def usage_chunk(self, event: Finished) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [], "usage": self._usage(event)}


def _as_api_error(error: Exception) -> APIError:
    if isinstance(error, APIError):
        return error
    if isinstance(error, InvalidArgumentError):  # a value the runner refused: the request's fault
        return bad_request(str(error))
    return APIError(500, "internal server error (see the server log)", type="server_error")


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class _EventStream(StreamingResponse):
    """An SSE response that runs `on_close` however it ends (finished, client gone, shutdown)."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def create_app(config: ServeConfig, llm: Any | None = None) -> Starlette:
    """The ASGI app. Loads `config.path` (unless an ember LLM is given) and its sessions now, so a
    bad file fails here, before a port is bound."""
    server = _Server(config, llm)

    async def chat(request: Request) -> Response:
        return await server.handle(request, "/v1/chat/completions", chat=True)

    async def completions(request: Request) -> Response:
        return await server.handle(request, "/v1/completions", chat=False)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal server error"
        message = f"{request.method} {request.url.path}: {detail}"
        return JSONResponse(APIError(status, message, type="invalid_request_error" if status < 500 else "server_error",
                                     code="not_found" if status == 404 else None).body(), status_code=status)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        server.shutdown()

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", server.models, methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/metrics", server.metrics_text, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.server = server
    return app
