"""The Ray Serve application on a real local Ray: one deployment of two replicas (tiny model,
half a CPU each) shared by this module's tests, then torn down the way `redraft cluster` does.

Order matters: affinity is checked while the replicas are stable, then one is killed, then the
teardown is checked for leftover Ray processes."""

import threading
import time

import pytest

pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'redraft[cluster]'")
httpx = pytest.importorskip("httpx")

import ray  # noqa: E402
from cluster_helpers import free_port, ray_processes  # noqa: E402

from redraft.engine import Engine, SamplerConfig  # noqa: E402
from redraft.server.cluster import app  # noqa: E402
from redraft.server.core.remote import RemoteEngine, RemoteUnavailable, session_id  # noqa: E402

TOKEN = "cluster-test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
GREEDY = SamplerConfig(span=8, heal=False)
PROMPTS = [("def add(a, b):\n    return ", "\n"), ("items = [1, 2, 3]\ntotal = ", "\n"),
           ("for i in range(10):\n    print(", ")\n")]


class Cluster:
    def __init__(self, url: str, daemons: set[int]):
        self.url, self.daemons, self.down = url, daemons, False

    def teardown(self) -> None:
        if not self.down:
            self.down = True
            try:
                app.teardown()
            finally:
                ray.shutdown()

    def get(self, path: str, session: str | None = None, **kw) -> httpx.Response:
        headers = {**AUTH, **({"x-session-id": session} if session else {})}
        return httpx.get(self.url + path, headers=headers, timeout=30, **kw)

    def health(self) -> dict:
        r = self.get(app.HEALTH)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture(scope="module")
def cluster(tiny_model):
    before = ray_processes()
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=256 * 2**20, logging_level="WARNING",
             log_to_driver=False)
    port = free_port()
    config = app.ClusterConfig(model=str(tiny_model), replicas=2, num_cpus=0.5, dtype="float32", token=TOKEN,
                               max_ongoing_requests=8)
    c = Cluster(app.deploy(config, port=port), ray_processes() - before)
    deadline = time.monotonic() + 30
    while len(c.health()["replicas"]) < 2 and time.monotonic() < deadline:  # both have reported
        time.sleep(0.2)
    yield c
    c.teardown()


@pytest.fixture(scope="module")
def engine(tiny_model):
    return Engine.load(str(tiny_model), dtype="float32")


def test_every_route_needs_the_token(cluster):
    for path in (app.HEALTH, "/v1/redraft/engine/info", "/v1/models"):
        assert httpx.get(cluster.url + path, timeout=30).status_code == 401, path
        assert cluster.get(path).status_code == 200, path


def test_a_session_stays_on_its_replica_and_documents_spread(cluster):
    where: dict[str, set[str]] = {}
    for rnd in range(3):
        for n in range(16):
            sid = session_id(f"file:///doc{n}.py")
            r = cluster.get("/v1/redraft/engine/info", session=sid)
            assert r.status_code == 200
            where.setdefault(sid, set()).add(r.headers[app.REPLICA_HEADER])
    assert len(where) == 16
    assert all(len(replicas) == 1 for replicas in where.values()), where  # affinity: 48 of 48
    used = set().union(*where.values())
    assert used == {r["replica"] for r in cluster.health()["replicas"]} and len(used) == 2


def test_remote_engine_through_the_cluster_gets_the_engine_text(cluster, engine):
    remote = RemoteEngine(cluster.url, token=TOKEN, timeout_s=30)
    try:
        want = [engine.infill(p, s, sampler=GREEDY) for p, s in PROMPTS]
        got, errors = [None] * len(PROMPTS), []

        def call(i):
            try:
                got[i] = remote.infill(*PROMPTS[i], sampler=GREEDY, cache_key=f"file:///p{i}.py")
            except Exception as e:  # noqa: BLE001 (asserted on)
                errors.append(e)
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
        assert [g.text for g in got] == [w.text for w in want]
        assert remote.score("x = ", "\n", ["1", "2"]) == pytest.approx(engine.score("x = ", "\n", ["1", "2"]))
    finally:
        remote.close()
    deadline = time.monotonic() + 5  # replicas report their loads twice a second
    while sum(r["requests"] for r in cluster.health()["replicas"]) < len(PROMPTS) and time.monotonic() < deadline:
        time.sleep(0.1)
    loads = cluster.health()
    assert len(loads["replicas"]) == 2
    assert sum(r["requests"] for r in loads["replicas"]) >= len(PROMPTS)
    for r in loads["replicas"]:
        assert {"active", "queued", "running", "requests_per_batch", "max_batch", "context_cache"} <= set(r)


def test_concurrent_requests_on_one_replica_share_batches(cluster):
    sid = session_id("file:///shared-replica.py")
    body = {"sampler": {"span": 60, "threshold": 1.0, "heal": False}, "stop": None, "previews": False}
    replicas, results = [], []

    def call(i):
        with httpx.Client(timeout=60) as client:
            r = client.post(cluster.url + "/v1/redraft/engine/infill", headers={**AUTH, "x-session-id": sid},
                            json={**body, "requests": [{"prefix": f"x{i} = ", "suffix": "\n"}], "cache_key": f"k{i}"})
        replicas.append(r.headers[app.REPLICA_HEADER])
        results.append("event: result" in r.text)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [True] * 4 and len(set(replicas)) == 1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        load = next(r for r in cluster.health()["replicas"] if r["replica"] == replicas[0])
        if load["max_batch"] >= 2:
            break
        time.sleep(0.1)
    assert load["max_batch"] >= 2, load  # requests that came while a batch ran formed the next one


def test_a_replica_killed_mid_stream_fails_the_client_and_the_survivor_answers(cluster):
    key = "file:///killed.py"
    victim = cluster.get("/v1/redraft/engine/info", session=session_id(key)).headers[app.REPLICA_HEADER]
    remote = RemoteEngine(cluster.url, token=TOKEN, timeout_s=20)
    started = threading.Event()
    try:
        def kill_when_streaming():
            started.wait(20)
            ray.kill(ray.get_actor(f"SERVE_REPLICA::{app.APP_NAME}#{app.DEPLOYMENT}#{victim}", namespace="serve"),
                     no_restart=True)
        killer = threading.Thread(target=kill_when_streaming)
        killer.start()
        long = SamplerConfig(span=300, threshold=1.0, heal=False)  # one token per step: ~300 steps
        t0 = time.monotonic()
        with pytest.raises(RemoteUnavailable):
            remote.infill(*PROMPTS[0], sampler=long, cache_key=key, on_preview=lambda p: started.set())
        failed_after = time.monotonic() - t0
        killer.join(20)
        assert started.is_set()
        assert failed_after < 20  # a clear failure within the client's timeout
        again = remote.infill(*PROMPTS[0], sampler=GREEDY, cache_key=key)
        assert again.text  # the next request is answered ...
    finally:
        remote.close()
    r = cluster.get("/v1/redraft/engine/info", session=session_id(key))
    assert r.status_code == 200 and r.headers[app.REPLICA_HEADER] != victim  # ... by a live replica
    assert victim not in {x["replica"] for x in cluster.health()["replicas"]}


def test_teardown_leaves_no_ray_process(cluster):
    assert cluster.daemons, "ray.init started no raylet/gcs_server"
    cluster.teardown()
    deadline = time.monotonic() + 15
    while cluster.daemons & ray_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not cluster.daemons & ray_processes()
