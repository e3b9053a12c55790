"""Typed settings of `ember serve` (validated on construction)."""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["RayConfig", "ServeConfig"]


@dataclass(frozen=True)
class ServeConfig:
    """What `ember serve` serves and how.

    path: the .ember file; model_name: the id clients send as `model` (default: the file's stem);
    sessions: conversations generated at once (each costs one KV cache + arena, never the
    weights again); max_queue: requests that may wait for a free session (one more gets 429);
    api_key: when set, requests must carry `Authorization: Bearer <api_key>`; threads: kernel
    threads (None: one per physical core); shutdown_timeout_s: how long a stop (SIGTERM, Ctrl-C)
    lets in-flight requests finish before they are cancelled."""

    path: str
    model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    sessions: int = 1
    max_queue: int = 16
    api_key: str | None = None
    threads: int | None = None
    mmap: bool = False
    shutdown_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"ServeConfig.path must be the path of a .ember file, got {self.path!r}")
        if self.model_name is None:
            object.__setattr__(self, "model_name", os.path.splitext(os.path.basename(self.path))[0])
        if not isinstance(self.model_name, str) or not self.model_name:
            raise ValueError(f"ServeConfig.model_name must be a non-empty string, got {self.model_name!r}")
        _check_int("port", self.port, 0, 65535)
        _check_int("sessions", self.sessions, 1, 1024)
        _check_int("max_queue", self.max_queue, 0, 1_000_000)
        if self.threads is not None:
            _check_int("threads", self.threads, 1, 4096)
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ValueError("ServeConfig.api_key must be None (no auth) or a non-empty string")
        if isinstance(self.shutdown_timeout_s, bool) or not isinstance(self.shutdown_timeout_s, (int, float)) \
                or not 0 <= self.shutdown_timeout_s <= 3600:
            raise ValueError(f"ServeConfig.shutdown_timeout_s must be in [0, 3600] seconds, got {self.shutdown_timeout_s!r}")


@dataclass(frozen=True)
class RayConfig:
    """How `ember serve --ray` runs the app as a Ray Serve deployment.

    replicas: copies of the app, each a Ray actor that loads the file itself with its own
    `ServeConfig.sessions`; address: the Ray cluster to join: None starts a local Ray on this
    machine (stopped again on exit), "auto" joins the cluster this node was added to with
    `ray start`, "HOST:PORT" the cluster whose head node listens there."""

    replicas: int = 1
    address: str | None = None

    def __post_init__(self) -> None:
        _check_int("replicas", self.replicas, 1, 4096, owner="RayConfig")
        if self.address is not None and (not isinstance(self.address, str) or not self.address.strip()):
            raise ValueError(f"RayConfig.address must be None (a local Ray), 'auto' or 'HOST:PORT', "
                             f"got {self.address!r}")


def _check_int(name: str, value: object, lo: int, hi: int, owner: str = "ServeConfig") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{owner}.{name} must be an int in [{lo}, {hi}], got {value!r}")
