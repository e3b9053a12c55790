"""`ember serve --ray`: the same ASGI app as a Ray Serve deployment, for more than one machine.

Each replica is a Ray actor that loads the .ember file itself (so the file must be at the same
path on every node, or on shared storage) and builds `create_app(config)`: its own pool of
`config.sessions` sessions and its own /health and /metrics. Ray's HTTP proxy (one per node, on
`config.host:config.port`) takes the requests and routes each to the less busy of two replicas
it samples; every response names the replica that answered in an `x-ember-replica` header.

    ember serve smol.ember --ray --replicas 2 --threads 4            # a local Ray on this machine
    ember serve "$MODELS/smol.ember" --ray --ray-address auto --replicas 8 --threads 4   # a cluster
    # ($MODELS: a folder that holds the file at the same path on every node, your choice)

or from Python, on a Ray that is already up:

    from ray import serve
    from ember.llm.serve.config import ServeConfig
    from ember.llm.serve.ray_deployment import build_app

    serve.run(build_app(ServeConfig(path="smol.ember", threads=4), replicas=2),  # that path on every node
              name="ember", route_prefix="/")

Needs the optional ``ray`` extra (``pip install "ember[ray]"``); ray is imported only when a
function here runs, never by importing ember.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from ember.llm.serve.config import RayConfig, ServeConfig

__all__ = ["APP_NAME", "REPLICA_HEADER", "DeploymentFailedError", "RayConfig", "RayMissingError", "build_app",
           "replica_app", "run"]

APP_NAME = "ember"
REPLICA_HEADER = "x-ember-replica"

# Ray Serve collects this logger's records in each replica's log (and echoes them to the driver).
log = logging.getLogger("ray.serve")


class RayMissingError(ImportError):
    """Ray Serve is not installed."""


class DeploymentFailedError(RuntimeError):
    """The replicas could not start (a file that does not load, too little memory, ...)."""


def _serve() -> Any:
    try:
        from ray import serve
    except ImportError as error:
        raise RayMissingError(f"serving with Ray needs Ray Serve ({error.name or 'ray'} is missing): "
                              "pip install 'ember[ray]'", name=error.name) from None
    return serve


class _ReplicaHeader:
    """ASGI middleware: adds `x-ember-replica: <Ray replica id>` to every HTTP response, so a
    client (or a log line) can tell which replica answered behind Ray's proxy."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_replica(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), self.header]
            await send(message)

        await self.app(scope, receive, send_with_replica)


def replica_app(config: ServeConfig) -> Any:
    """One replica's app: `create_app(config)` (the file loaded here, in the replica's process)
    plus the replica header. Ray runs the app's lifespan itself (startup when the replica
    starts, shutdown, which closes the session pool, when Ray stops the replica)."""
    from ember.llm.serve.app import create_app

    serve = _serve()
    replica = serve.get_replica_context().replica_tag
    app = create_app(config)
    app.add_middleware(_ReplicaHeader, replica=replica)
    log.info("ember replica %s: %s as %r, %d session(s)", replica, config.path, config.model_name, config.sessions)
    return app


def build_app(config: ServeConfig, replicas: int = 1) -> Any:
    """The Ray Serve application (a `ray.serve.Application`): `replicas` copies of the ember app.
    Pass it to `serve.run(..., route_prefix="/")`; the file is loaded by each replica, not here.

    Each replica reserves `config.threads` CPUs, so Ray places no more replicas on a node than its
    cores run (1 when threads is None, though its kernels then use every core: set threads when
    replicas share a node). Ray sends a replica at most `sessions + max_queue` requests at once
    (what its pool runs plus what may wait there) and each request to the less busy of two
    replicas it samples; when every replica is full, each Ray proxy holds up to `max_queue` more
    and answers 429 beyond that, as one `ember serve` does."""
    RayConfig(replicas=replicas)  # validates replicas
    serve = _serve()
    from ray.serve.config import BackpressureConfig

    def app() -> Any:  # called in each replica when it starts
        return replica_app(config)

    @serve.ingress(app)
    class EmberServe:
        """One replica of `ember serve`."""

    deployment = serve.deployment(
        EmberServe, name=APP_NAME, num_replicas=replicas,
        ray_actor_options={"num_cpus": config.threads or 1},
        max_ongoing_requests=config.sessions + config.max_queue,
        max_queued_requests=max(1, config.max_queue),  # Ray takes -1 (no limit) or a positive count
        backpressure_config=BackpressureConfig(status_code=429),
        # How long a stopping replica lets its requests in flight finish (as --shutdown-timeout
        # does for one process); then the app's shutdown runs and Ray ends the replica.
        graceful_shutdown_timeout_s=config.shutdown_timeout_s,
    )
    return deployment.bind()


def run(config: ServeConfig, ray_config: RayConfig, log_level: str = "info") -> None:
    """Starts (or joins) Ray, deploys `build_app` behind Ray's HTTP proxy on config.host:port and
    serves until SIGTERM or Ctrl-C; then stops the app (all of Serve and the Ray it started when
    the Ray is local) and returns. Call it from the main thread (it installs signal handlers)."""
    serve = _serve()
    import ray

    if config.port == 0:
        raise ValueError("--ray needs a fixed --port (Ray's HTTP proxy listens on the same port on "
                         "every node), got 0: pass --port PORT")
    local = ray_config.address is None and not os.environ.get("RAY_ADDRESS")
    if local and not os.path.isfile(config.path):
        raise ValueError(f"{config.path!r} is not a file: pass the path of a .ember file")
    # A local Ray without its dashboard: it would add seconds and a few processes to every start,
    # and `ray status` / Serve's own logs still work.
    ray.init(address=ray_config.address, include_dashboard=False if local else None,
             logging_level=log_level.upper())
    try:
        if local:
            _check_cpus(ray.cluster_resources().get("CPU", 0.0), config, ray_config)
        serve.start(http_options={"host": config.host, "port": config.port})
        try:
            try:
                serve.run(build_app(config, ray_config.replicas), name=APP_NAME, route_prefix="/",
                          logging_config={"log_level": log_level.upper()})
            except RuntimeError as error:
                raise DeploymentFailedError(_replica_error(serve) or str(error)) from None
            print(f"ember serve: {ray_config.replicas} replica(s) of {config.model_name!r} at "
                  f"http://{config.host}:{config.port}/v1 (Ray Serve); Ctrl-C stops", flush=True)
            _wait_for_stop()
        finally:
            # A local Ray goes away with this process: stop all of Serve (each replica drains
            # for shutdown_timeout_s). On a shared cluster only this app goes; Serve's proxies
            # and other applications stay.
            if local:
                serve.shutdown()
            else:
                serve.delete(APP_NAME)
    finally:
        ray.shutdown()


def _wait_for_stop() -> None:
    # ray.init replaced the SIGTERM handler with one that exits 1 at once (and SIGINT raises
    # KeyboardInterrupt while deploying); once serving, a stop drains the app and returns, so the
    # process exits 0.
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(1.0):  # a timed wait: the handlers run between the waits
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _replica_error(serve: Any) -> str | None:
    # serve.run only says that the deployment failed; the replicas' own error (e.g. "... is not an
    # .ember program") ends the deployment's status message, after its traceback.
    app = serve.status().applications.get(APP_NAME)
    message = app.deployments[APP_NAME].message if app is not None and APP_NAME in app.deployments else ""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    return f"the replicas failed to start: {lines[-1].strip()}" if lines else None


def _check_cpus(available: float, config: ServeConfig, ray_config: RayConfig) -> None:
    # Replicas that do not fit stay pending and serve.run waits for them forever: say so now.
    needed = ray_config.replicas * (config.threads or 1)
    if needed > available:
        raise ValueError(f"{ray_config.replicas} replica(s) x {config.threads or 1} thread(s) need {needed} CPUs, "
                         f"this machine's Ray has {available:g}: lower --replicas or --threads, or join a cluster "
                         "with --ray-address")
