"""One request's generation on one session: runs on a worker thread, streams to the event loop.

The worker iterates the session's `generate(ids, stream=True)` and posts each text piece to an
asyncio queue; `cancel()` (the client went away, or shutdown) asks the runner to stop, which
ends the generation at the next token. `on_done` runs on the loop when the thread is finished
with the session (only then may the session be handed to another request).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

__all__ = ["Finished", "Generation", "finish_reason"]

_FINISH = {"eos": "stop", "stop_token": "stop", "stop_string": "stop", "max_tokens": "length",
           "context_full": "length"}


def finish_reason(stop_reason: str) -> str | None:
    """OpenAI's finish_reason for a runner stop reason (None: cancelled)."""
    return _FINISH.get(stop_reason)


@dataclass(frozen=True)
class Finished:
    """The end of a generation: the session's stats for it."""

    stats: Any  # ember.llm.api.GenerationStats


class Generation:
    def __init__(self, llm: Any, ids: Sequence[int], config: Any, on_done: Callable[[], None]) -> None:
        self._llm = llm
        self._ids = list(ids)
        self._config = config
        self._on_done = on_done
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._finished = False  # set (under _lock) before the session is released

    def start(self, executor: Executor) -> None:
        executor.submit(self._run)

    def cancel(self) -> bool:
        """Stops the generation at the next token (any thread, any time, idempotent). Returns
        True when it stopped a running generation, False when it had already finished (then the
        session may belong to another request: it is left alone)."""
        with self._lock:
            if self._finished or self._cancelled.is_set():
                return False
            self._cancelled.set()
            self._llm.stop()
            return True

    def _post(self, kind: str, value: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _run(self) -> None:
        try:
            if self._cancelled.is_set():
                self._post("error", asyncio.CancelledError())
                return
            pieces = self._llm.generate(self._ids, stream=True, config=self._config)
            for piece in pieces:
                if self._cancelled.is_set():
                    self._llm.stop()  # start() clears an earlier stop(): ask again; ends at the next token
                self._post("piece", piece)
            self._post("done", Finished(self._llm.stats))
        except BaseException as error:  # reported to the request, never lost on a thread
            self._post("error", error)
        finally:
            with self._lock:
                self._finished = True
            try:
                self._loop.call_soon_threadsafe(self._on_done)
            except RuntimeError:
                pass

    async def events(self) -> AsyncIterator[str | Finished]:
        """Text pieces, then one Finished; raises what the generation raised."""
        while True:
            kind, value = await self._queue.get()
            if kind == "piece":
                yield value
            elif kind == "done":
                yield value
                return
            else:
                raise value
