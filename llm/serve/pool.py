"""A pool of sessions of one model with a bounded wait queue and prefix-aware routing.

Runs on the server's event loop (not thread-safe: call it from the loop only). A request
acquires a session for its prompt ids: of the free sessions, the one whose cached tokens share
the longest prefix with the prompt (a continuing conversation finds the session that already
holds its earlier turns, so only the new turn is prefilled; ties go to the least recently used).
When every session is busy the request waits in FIFO order; when `max_queue` requests already
wait, it is refused at once (QueueFull -> HTTP 429).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PoolClosed", "QueueFull", "SessionPool", "Slot"]


class QueueFull(Exception):
    """Every session is busy and the wait queue is full."""


class PoolClosed(Exception):
    """The server is shutting down."""


@dataclass(eq=False)
class Slot:
    index: int
    llm: Any                                   # an ember LLM (one session)
    busy: bool = False
    last_used: int = 0
    cached: list[int] = field(default_factory=list)  # the session's cached ids while it is free


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SessionPool:
    def __init__(self, sessions: Sequence[Any], max_queue: int) -> None:
        if not sessions:
            raise ValueError("a session pool needs at least one session")
        self._slots = [Slot(i, s) for i, s in enumerate(sessions)]
        self._max_queue = max_queue
        self._waiters: deque[asyncio.Future[Slot]] = deque()
        self._clock = itertools.count(1)
        self._closed = False

    @property
    def size(self) -> int:
        return len(self._slots)

    @property
    def busy(self) -> int:
        return sum(s.busy for s in self._slots)

    @property
    def queue_depth(self) -> int:
        return sum(not w.done() for w in self._waiters)

    @property
    def slots(self) -> list[Slot]:
        return list(self._slots)

    def _pick(self, ids: Sequence[int]) -> Slot | None:
        free = [s for s in self._slots if not s.busy]
        if not free:
            return None
        return max(free, key=lambda s: (_common_prefix(s.cached, ids), -s.last_used))

    async def acquire(self, ids: Sequence[int]) -> Slot:
        if self._closed:
            raise PoolClosed()
        slot = self._pick(ids)
        if slot is not None:
            slot.busy = True
            return slot
        if self.queue_depth >= self._max_queue:
            raise QueueFull()
        waiter: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(waiter.result())  # handed a session just as the request went away
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self, slot: Slot) -> None:
        """Returns a session whose generation has finished (its thread is done with it)."""
        slot.cached = list(slot.llm.cached_tokens)
        slot.last_used = next(self._clock)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(slot)  # stays busy: handed straight to the next request
                return
        slot.busy = False

    def close(self) -> None:
        """Refuses new requests and fails the waiting ones (shutdown)."""
        self._closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed())
