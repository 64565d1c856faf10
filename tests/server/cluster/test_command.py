"""`redraft cluster` as a user runs it: a real process that starts its own local Ray, prints the
URL once ready, answers, and on Ctrl-C leaves no Ray process behind. Also: nothing imports Ray
unless this command runs."""

import os
import signal
import subprocess
import sys
import time

import pytest

from cluster_helpers import command_line, descendants, free_port, listening, loopback, ray_processes

pytest.importorskip("ray.serve", reason="Ray Serve is not installed: pip install 'redraft[cluster]'")
httpx = pytest.importorskip("httpx")


def test_the_cli_and_the_servers_do_not_import_ray():
    code = ("import sys\n"
            "import redraft.server.cli, redraft.server.http.app, redraft.server.core.remote\n"
            "from redraft.server.cli import _parser\n"
            "_parser().parse_args(['cluster', '--replicas', '2'])\n"
            "assert 'ray' not in sys.modules, 'ray was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_arguments_are_refused_before_ray_starts(capsys):
    from redraft.server.cli import main
    for args, says in ((["--autoscale", "3"], "MIN,MAX"), (["--host", "0.0.0.0"], "without --token"),
                       (["--replicas", "0"], "at least 1"), (["--autoscale", "2,1"], "MIN <= MAX")):
        assert main(["cluster", *args]) == 2
        assert says in capsys.readouterr().err
    assert not ray_processes()


# The real command's entry point as a user's terminal starts it: Ctrl-C (SIGINT) raises
# KeyboardInterrupt even when the test suite itself runs as a background job, whose children
# inherit SIGINT ignored (a shell's rule for `cmd &`). Every thread's stack goes to stderr on
# SIGUSR1, so a hang on Ctrl-C says where.
CLUSTER = ("import faulthandler, signal, sys\n"
           "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
           "faulthandler.register(signal.SIGUSR1)\n"
           "from redraft.server.cli import main\n"
           "sys.exit(main(sys.argv[1:]))\n")


def test_cluster_command_serves_until_interrupted_and_leaves_no_ray_process(tiny_model, tmp_path):
    if ray_processes():
        pytest.skip("another Ray is running on this machine: leftovers could not be told apart")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", CLUSTER, "cluster", "--replicas", "1", "--num-cpus",
                                 "0.5", "--port", str(port), "--model", str(tiny_model), "--dtype", "float32"],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        line = proc.stdout.readline()  # printed once the replica is up
        assert f"http://127.0.0.1:{port}" in line, line
        daemons = ray_processes()
        assert daemons
        r = httpx.get(f"http://127.0.0.1:{port}/v1/redraft/engine/info", timeout=30)
        assert r.status_code == 200 and r.json()["protocol"] == 1
        # Every port its Ray opened (GCS, raylet, workers, agents, Serve's proxy) is on loopback,
        # and no metrics exporter or dashboard listens, except the one Ray gives no option for:
        # a Serve replica's inter-deployment gRPC server (docs/remote-and-cluster.md).
        ports = listening(descendants(proc.pid) | daemons)
        assert len(ports) >= 5 and ("127.0.0.1", port) in {(a, p) for _, a, p in ports}, ports
        wide = [(pid, a, p) for pid, a, p in ports if not loopback(a)]
        # (Ray retitles the replica by the method it is running: `...engine.handle_request...`)
        titles = [command_line(pid) for pid, _, _ in wide]
        assert len(titles) == 1 and titles[0].startswith("ray::ServeReplica:redraft:engine"), (titles, wide)
        assert 8265 not in {p for _, _, p in ports}  # the dashboard's port
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            pytest.fail("still running 60 s after Ctrl-C; its stderr:\n" + log.read_text()[-20000:])
        assert code == 0, log.read_text()[-5000:]
        deadline = time.monotonic() + 15
        while daemons & ray_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not daemons & ray_processes()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_deployment_options_follow_the_arguments():
    from redraft.server.cli import _parser
    from redraft.server.cluster import app
    from redraft.server.cluster.command import cluster_config

    args = _parser().parse_args(["cluster", "--autoscale", "1,3", "--num-cpus", "2", "--num-gpus", "1",
                                 "--max-ongoing-requests", "6", "--token", "t"])
    deployment = app.application(cluster_config(args))._bound_deployment
    options = deployment._deployment_config
    assert deployment.ray_actor_options == {"num_cpus": 2.0, "num_gpus": 1.0}
    assert (options.autoscaling_config.min_replicas, options.autoscaling_config.max_replicas) == (1, 3)
    assert deployment.max_ongoing_requests == 6
    assert options.request_router_config.request_router_class == app.ROUTER
    assert options.request_router_config.request_router_kwargs["num_fallback_replicas"] == 1
    fixed = app.application(cluster_config(_parser().parse_args(["cluster", "--replicas", "3"])))._bound_deployment
    assert fixed.num_replicas == 3 and fixed._deployment_config.autoscaling_config is None
    assert cluster_config(args).threads == 2  # torch threads default to the replica's CPUs
