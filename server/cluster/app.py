"""The Ray Serve application: the engine on replicas, a document's requests on one of them.

Each replica of the `engine` deployment loads the model once (`torch.set_num_threads` as
configured; on a GPU when it was given one), wraps it in a BatchingEngine (continuous
batching: every running caller's step in one forward, see batcher.py) and serves one Starlette
ingress made of
  - the HTTP API's routes (`http.app.build_app`: Ollama/OpenAI completions, stats), and
  - the engine protocol's routes (`http.engine_routes.engine_routes`: info, infill, score,
    forget), which `redraft serve --engine-url` speaks, and
  - GET /v1/redraft/health: every live replica with its load (callers waiting and running,
    batch sizes, context-cache hits).
Every response says which replica answered (`x-redraft-replica`). A token guards every route
(`Authorization: Bearer T`), as the rest of the HTTP API does.

Routing: Serve's ConsistentHashRouter hashes the `x-session-id` header (an opaque document id)
onto a ring of replicas, so a document's keys/values stay on one replica while the replica set
is stable; when that replica is at `max_ongoing_requests` the next one on the ring takes the
request (`fallback_replicas`). Loads travel through a small named actor (LoadBoard) that every
replica reports to twice a second; the health route reads it and drops replicas whose actors
are gone, so a killed replica disappears from it at once.

It knows Ray Serve, the HTTP fronts and the engine; it knows nothing of editors or the CLI.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

log = logging.getLogger(__name__)

APP_NAME = "redraft"
DEPLOYMENT = "engine"
NAMESPACE = "redraft"
BOARD = "redraft-loads"
ROUTER = "ray.serve.experimental.consistent_hash_router.ConsistentHashRouter"
REPLICA_HEADER = "x-redraft-replica"
HEALTH = "/v1/redraft/health"
REPORT_S = 0.5  # how often a replica reports its load
REPLICA_PREFIX = "SERVE_REPLICA::"


@dataclass(frozen=True)
class ClusterConfig:
    """How the deployment runs: replicas (fixed, or autoscaled between two bounds), what each
    one gets, and what it serves."""

    model: str | None = None  # None: the shipped default
    replicas: int = 1
    autoscale: tuple[int, int] | None = None  # (min, max) replicas; overrides `replicas`
    num_cpus: float = 1.0  # per replica
    num_gpus: float = 0.0  # per replica; > 0 runs the engine on CUDA
    threads: int = 1  # torch intra-op threads per replica
    dtype: str = "auto"
    max_ongoing_requests: int = 16  # per replica; more are routed to the next replica on the ring
    max_rows: int = 64  # candidate rows per engine batch
    fallback_replicas: int = 1  # ring successors tried when a session's replica is full (0: strict)
    token: str | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("replicas must be at least 1")
        if self.autoscale is not None and not 0 <= self.autoscale[0] <= self.autoscale[1] or (
                self.autoscale is not None and self.autoscale[1] < 1):
            raise ValueError(f"autoscale must be MIN,MAX with 0 <= MIN <= MAX and MAX >= 1, got {self.autoscale}")
        if self.num_cpus < 0 or self.num_gpus < 0 or self.threads < 1 or self.max_ongoing_requests < 1:
            raise ValueError("num_cpus and num_gpus must be >= 0, threads and max_ongoing_requests >= 1")


@ray.remote(num_cpus=0)
class LoadBoard:
    """The last load each replica reported, by replica id."""

    def __init__(self) -> None:
        self.loads: dict[str, dict] = {}

    def report(self, replica: str, load: dict) -> None:
        self.loads[replica] = {**load, "reported": time.time()}

    def drop(self, replica: str) -> None:
        self.loads.pop(replica, None)

    def read(self) -> dict[str, dict]:
        return dict(self.loads)


def board():
    """The app's LoadBoard (made by whoever asks first; detached, so the teardown kills it)."""
    return LoadBoard.options(name=BOARD, namespace=NAMESPACE, get_if_exists=True, lifetime="detached").remote()


class EngineReplica:
    """One replica: the engine, its batching wrapper and the ingress app over them."""

    def __init__(self, config: ClusterConfig):
        import torch

        from redraft.server.core.inference import Inference

        from .batcher import BatchingEngine
        torch.set_num_threads(config.threads)
        self.config = config
        context = serve.get_replica_context()
        self.replica = context.replica_id.unique_id
        device = "cuda" if config.num_gpus > 0 and torch.cuda.is_available() else "cpu"
        self.inference = Inference()
        error = self.inference.load(config.model, device, config.dtype).result()
        if error is not None:
            raise RuntimeError(error)  # Serve marks the replica unhealthy and says why
        # Continuous batching merges every running request's forwards into one pass: it needs
        # dynamic steps (on CUDA the engine would replay one captured step per batch instead).
        self.inference.engine.dynamic_steps()
        self.batcher = BatchingEngine(self.inference.engine, max_rows=config.max_rows)
        self.inference.engine = self.batcher  # every route, HTTP API or protocol, shares the batches
        # One thread per request the replica takes: each waits while the batcher runs its request
        # with the others (the batcher is the engine's only user, so its one-thread rule holds).
        self.inference.executor.shutdown(wait=True)
        self.inference.executor = ThreadPoolExecutor(max_workers=config.max_ongoing_requests + 2,
                                                     thread_name_prefix="redraft-request")
        self.board = board()
        self._stop = threading.Event()
        threading.Thread(target=self._report, name="redraft-load-report", daemon=True).start()

    def __serve_build_asgi_app__(self):
        return build_ingress(self.inference, self.replica, self.board, self.config.token, self.config.model)

    def load(self) -> dict:
        return {"replica": self.replica, "active": self.batcher.active, **self.batcher.stats()}

    def _report(self) -> None:
        while not self._stop.wait(REPORT_S):
            try:
                self.board.report.remote(self.replica, self.load())
            except Exception as e:  # the board is gone (teardown): nothing to report to
                log.debug("load report failed: %s", e)

    def __del__(self):
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            self.batcher.close()
            try:
                self.board.drop.remote(self.replica)
            except Exception:  # the board may be gone first
                pass


def build_ingress(inference, replica: str, loads, token: str | None, model: str | None):
    """The replica's Starlette app: HTTP API + engine protocol + health, tagged with the replica.
    Engine calls of both APIs run on the Inference's executor, against its engine (the batcher)."""
    from redraft.server.core import wire
    from redraft.server.core.settings import ServerConfig
    from redraft.server.http.app import build_app
    from redraft.server.http.engine_routes import engine_routes

    app = build_app(inference, ServerConfig(model=model), token)
    if wire.INFILL not in {getattr(r, "path", None) for r in app.router.routes}:  # (build_app mounts them)
        app.router.routes.extend(engine_routes(lambda: inference.engine, token, executor=inference.executor))

    async def health(request: Request) -> JSONResponse:
        if not _authorized(request, token):
            return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
        return JSONResponse(await read_health(loads, replica))
    app.router.routes.append(Route(HEALTH, health, methods=["GET"]))
    app.add_middleware(ReplicaHeader, replica=replica)
    return app


def _authorized(request: Request, token: str | None) -> bool:
    if token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


async def read_health(loads, answered_by: str) -> dict:
    """Live replicas and their last reported loads; replicas whose actor is gone are left out."""
    reported = await loads.read.remote()
    live = await asyncio.to_thread(live_replicas)
    replicas = []
    for rid, load in sorted(reported.items()):
        if rid not in live:
            continue
        age = time.time() - load.pop("reported")
        replicas.append({**load, "age_s": round(age, 3)})
    return {"app": APP_NAME, "answered_by": answered_by, "replicas": replicas,
            "active": sum(r["active"] for r in replicas)}


def live_replicas(app: str = APP_NAME) -> set[str]:
    """Replica ids of the deployment whose actors are alive now (from the named actors)."""
    prefix = f"{REPLICA_PREFIX}{app}#{DEPLOYMENT}#"
    return {a["name"][len(prefix):] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["name"].startswith(prefix)}


class ReplicaHeader:
    """ASGI middleware: every HTTP response names the replica that made it."""

    def __init__(self, app, replica: str):
        self.app, self.value = app, replica.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER.encode(), self.value)]}
            await send(message)
        await self.app(scope, receive, tagged)


def application(config: ClusterConfig):
    """The bound Serve application for `serve.run`."""
    scaling = ({"autoscaling_config": {"min_replicas": config.autoscale[0], "max_replicas": config.autoscale[1],
                                       "target_ongoing_requests": max(1, config.max_ongoing_requests // 2)}}
               if config.autoscale is not None else {"num_replicas": config.replicas})
    deployment = serve.deployment(
        serve.ingress()(EngineReplica), name=DEPLOYMENT, max_ongoing_requests=config.max_ongoing_requests,
        ray_actor_options={"num_cpus": config.num_cpus, "num_gpus": config.num_gpus},
        request_router_config=RequestRouterConfig(
            request_router_class=ROUTER,
            request_router_kwargs={"num_virtual_nodes": 100, "num_fallback_replicas": config.fallback_replicas}),
        **scaling)
    return deployment.bind(config)


def deploy(config: ClusterConfig, host: str = "127.0.0.1", port: int = 8000) -> str:
    """Start Serve's HTTP proxy on host:port and run the application (Ray must be initialised);
    returns the URL once every replica is up."""
    serve.start(http_options={"host": host, "port": port})
    board()  # made by the driver first, so replicas find it
    serve.run(application(config), name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def failure(error: Exception) -> str:
    """Why the application did not come up: the deployment's own message (a replica's error)
    when Serve has one, else the error."""
    try:
        message = serve.status().applications[APP_NAME].deployments[DEPLOYMENT].message
    except Exception:  # no status to read (Serve itself failed)
        message = ""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    # Serve's message ends with the replica's traceback, whose last line is the error itself
    return f"could not deploy: {lines[-1] if lines else error}"


def teardown(shutdown_serve: bool = True) -> None:
    """Delete the application and its load board; stop Serve too unless the cluster is shared."""
    try:
        serve.delete(APP_NAME)
    finally:
        try:
            ray.kill(ray.get_actor(BOARD, namespace=NAMESPACE))
        except ValueError:  # never made, or gone
            pass
        if shutdown_serve:
            serve.shutdown()
