"""`ember serve FILE`: the OpenAI-compatible HTTP server (Starlette app under uvicorn).

SIGTERM and Ctrl-C stop accepting connections, let the requests in flight finish for up to
--shutdown-timeout seconds, cancel the rest (each stops at its next token), and exit 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve", help="serve a .ember LLM over an OpenAI-compatible HTTP API",
        description="Serve FILE at /v1/chat/completions, /v1/completions and /v1/models (OpenAI-compatible), "
                    "plus /health and /metrics (Prometheus). Needs the serve extra: pip install 'ember[serve]'.")
    p.add_argument("file", metavar="FILE", help="a .ember LLM file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free port)")
    p.add_argument("--sessions", type=int, default=1, metavar="N",
                   help="conversations generated at once, over one copy of the weights (default 1)")
    p.add_argument("--max-queue", type=int, default=16, metavar="M",
                   help="requests that may wait for a session; one more is answered 429 at once (default 16)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="require 'Authorization: Bearer KEY' (default: $EMBER_API_KEY, else no key)")
    p.add_argument("--model-name", default=None, metavar="NAME",
                   help="the model id clients send as 'model' (default: FILE's name without .ember)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="kernel threads (default: one per core)")
    p.add_argument("--mmap", action="store_true", help="map the file instead of reading it into huge-page memory")
    p.add_argument("--shutdown-timeout", type=float, default=10.0, metavar="S",
                   help="on SIGTERM / Ctrl-C, seconds to let requests in flight finish before cancelling them")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ember.llm.serve.app import create_app
    except ImportError as error:
        print(f"ember serve needs the serve extra ({error.name} is missing): pip install 'ember[serve]'",
              file=sys.stderr)
        return 2
    from ember.llm.serve.config import ServeConfig
    from ember.runtime.errors import EmberError

    try:
        config = ServeConfig(
            path=args.file, model_name=args.model_name, host=args.host, port=args.port, sessions=args.sessions,
            max_queue=args.max_queue, api_key=args.api_key or os.environ.get("EMBER_API_KEY") or None,
            threads=args.threads, mmap=args.mmap, shutdown_timeout_s=args.shutdown_timeout)
        app = create_app(config)
    except (ValueError, EmberError) as error:
        print(f"ember serve: {error}", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn.Config(
        app, host=config.host, port=config.port, log_level=args.log_level,
        timeout_graceful_shutdown=config.shutdown_timeout_s, lifespan="on"))
    # uvicorn re-raises the stop signal once it has shut down; with these handlers in place that
    # re-raise is a no-op, so a requested stop ends the process with status 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    server.run()
    return 0 if server.started else 1
