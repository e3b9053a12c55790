"""`ember serve FILE`: the OpenAI-compatible HTTP server (Starlette app under uvicorn).

SIGTERM and Ctrl-C stop accepting connections, let the requests in flight finish for up to
--shutdown-timeout seconds, cancel the rest (each stops at its next token), and exit 0.

With --ray the same app runs as a Ray Serve deployment of --replicas copies behind Ray's HTTP
proxy (ember.llm.serve.ray_deployment), on a local Ray or a cluster (--ray-address).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

from ember.cli import fail

if TYPE_CHECKING:
    from ember.llm.serve.config import ServeConfig

__all__ = ["register", "server_stack"]


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
    ray = p.add_argument_group("scaling out with Ray Serve (needs the ray extra: pip install 'ember[ray]')")
    ray.add_argument("--ray", action="store_true",
                     help="serve as a Ray Serve deployment: --replicas copies, each loading FILE with its own "
                          "--sessions, behind Ray's HTTP proxy on --host/--port")
    ray.add_argument("--replicas", type=int, default=None, metavar="N",
                     help="with --ray: copies of the server (default 1); each reserves --threads CPUs (1 if unset)")
    ray.add_argument("--ray-address", default=None, metavar="ADDRESS",
                     help="with --ray: the Ray cluster to join ('auto': the one this node joined with `ray start`, "
                          "or HEAD:6379); default: start a local Ray for this process")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.ray:
        return _run_ray(args)
    if args.replicas is not None:
        return fail("serve", f"--replicas {args.replicas} needs --ray (replicas are Ray Serve replicas): add --ray, "
                    "or use --sessions N for more conversations in this one process", 2)
    if args.ray_address is not None:
        return fail("serve", f"--ray-address {args.ray_address} needs --ray: add --ray", 2)
    try:
        import uvicorn

        from ember.llm.serve.app import create_app
    except ImportError as error:
        return fail("serve", f"the serve extra is needed ({error.name} is missing): pip install 'ember[serve]'", 2)
    from ember.runtime.errors import EmberError

    try:
        config = _config(args)
        app = create_app(config)
    except (ValueError, EmberError) as error:
        return fail("serve", error, 2)
    loop, http = server_stack()
    print(f"ember serve: {_describe(config, app.state.server.llm)}; uvicorn on {loop} + {http}", file=sys.stderr)
    if (loop, http) != ("uvloop", "httptools"):
        print(f"ember serve: uvloop and httptools (in the serve extra) give ~5-9% more tokens/s than {loop} + {http}: "
              "pip install 'ember[serve]'", file=sys.stderr)
    server = uvicorn.Server(uvicorn.Config(
        app, host=config.host, port=config.port, log_level=args.log_level, loop=loop, http=http,
        timeout_graceful_shutdown=config.shutdown_timeout_s, lifespan="on"))
    # uvicorn re-raises the stop signal once it has shut down; with these handlers in place that
    # re-raise is a no-op, so a requested stop ends the process with status 0.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    server.run()
    return 0 if server.started else 1


def _describe(config: "ServeConfig", llm: Any) -> str:
    """What the server runs, for its first log line: model id, file, weights, context, sessions, threads."""
    from ember.runtime import cpu_info

    quant = llm.metadata.get("quant.linear") or llm.metadata.get("export.dtype") or "?"
    threads = config.threads if config.threads is not None else "one per core"
    return (f"model '{config.model_name}' from {config.path} ({quant}, context {llm.max_context_len}), "
            f"{config.sessions} session(s), kernel threads: {threads}, kernels {cpu_info()['isa']}")


def server_stack() -> tuple[str, str]:
    """uvicorn's event loop and HTTP parser for `ember serve`: uvloop and httptools where installed (the
    serve extra brings both; on Windows there is no uvloop), else asyncio and h11 (pure Python: more CPU
    per streamed token, taken from the cores the model runs on)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    return loop, http


def _config(args: argparse.Namespace) -> "ServeConfig":
    from ember.llm.serve.config import ServeConfig

    return ServeConfig(
        path=args.file, model_name=args.model_name, host=args.host, port=args.port, sessions=args.sessions,
        max_queue=args.max_queue, api_key=args.api_key or os.environ.get("EMBER_API_KEY") or None,
        threads=args.threads, mmap=args.mmap, shutdown_timeout_s=args.shutdown_timeout)


def _run_ray(args: argparse.Namespace) -> int:
    from ember.llm.serve.config import RayConfig

    try:
        config = _config(args)
        ray_config = RayConfig(replicas=1 if args.replicas is None else args.replicas, address=args.ray_address)
    except ValueError as error:
        return fail("serve", error, 2)
    from ember.llm.serve import ray_deployment

    try:
        import ember.llm.serve.app  # noqa: F401  (each replica builds this app: a missing extra fails here, once)
    except ImportError as error:
        return fail("serve", f"--ray needs the ray extra ({error.name} is missing): pip install 'ember[ray]'", 2)
    try:
        ray_deployment.run(config, ray_config, log_level=args.log_level)
    except (ray_deployment.RayMissingError, ValueError) as error:
        return fail("serve", error, 2)
    except ray_deployment.DeploymentFailedError as error:
        return fail("serve", f"{error} (the replicas' log above has the details)", 1)
    return 0
