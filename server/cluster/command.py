"""`redraft cluster`: start (or join) Ray, deploy the engine on Serve replicas, serve until Ctrl-C.

  redraft cluster [--replicas N | --autoscale MIN,MAX] [--host H] [--port P] [--model M]
                  [--token T] [--num-cpus C] [--num-gpus G] [--threads T]

Without RAY_ADDRESS it starts a local Ray (`ray.init`) just for this command and stops every
Ray process it started on the way out. That Ray is this machine's alone: its node address is
loopback, so the ports Ray opens (GCS, raylet, object manager, workers, the dashboard agent,
the runtime-env agent) listen on 127.0.0.1; the dashboard is off, so is the metrics exporter,
and Ray's token authentication is on (`local_ray`). Serve's HTTP proxy binds --host (127.0.0.1
by default). One port Ray gives no option for: each Serve replica's inter-deployment gRPC
server listens on all interfaces, behind Ray's token (docs/remote-and-cluster.md). With
RAY_ADDRESS it joins that cluster (its ports as it was started) and on the way out deletes only
its own application, leaving the cluster and any other Serve application running.
The URL is printed once every replica has loaded the model. Ctrl-C (or SIGTERM) tears down.

Ray is imported only when the command runs: `redraft --help` and every other command work
without the `cluster` extra.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import time

EXIT_USAGE = 2
DEFAULT_PORT = 8000


def arguments(p: argparse.ArgumentParser) -> None:
    size = p.add_mutually_exclusive_group()
    size.add_argument("--replicas", type=int, default=1, metavar="N", help="replicas of the engine (default 1)")
    size.add_argument("--autoscale", default=None, metavar="MIN,MAX",
                      help="autoscale between MIN and MAX replicas by ongoing requests")
    p.add_argument("--host", default="127.0.0.1", help="address Serve's HTTP proxy binds (default 127.0.0.1; "
                                                       "another one needs --token)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"port of Serve's HTTP proxy (default {DEFAULT_PORT})")
    p.add_argument("--model", default=None, help="checkpoint folder, shipped name, or pulled HF id on every node "
                                                 "(default: the shipped redraft-diffusion)")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    p.add_argument("--token", default=None, help="bearer token every request must carry")
    p.add_argument("--num-cpus", type=float, default=1.0, metavar="C", help="CPUs per replica (default 1)")
    p.add_argument("--num-gpus", type=float, default=None, metavar="G",
                   help="GPUs per replica (default: 1 when the cluster has a GPU, else 0)")
    p.add_argument("--threads", type=int, default=None, metavar="T",
                   help="torch threads per replica (default: its CPUs, at least 1)")
    p.add_argument("--max-ongoing-requests", type=int, default=16, metavar="N",
                   help="requests a replica takes at once before the next replica takes a session's request "
                        "(default 16)")


# Ray takes the node's address from the network unless the first is off (read when ray is
# imported): then the node address, and with it the servers Ray starts, is 127.0.0.1. The second
# is Ray's token authentication (Ray's own default for a new local Ray since 2.5x; said here).
LOCAL_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}
LOCAL_SYSTEM_CONFIG = {"enable_metrics_collection": False}  # no Prometheus exporter on any port


def run(args) -> int:
    """The command; returns the exit status."""
    address = os.environ.get("RAY_ADDRESS") or None
    if address is None:  # (set before ray is imported; the user's own setting wins)
        for key, value in LOCAL_ENV.items():
            os.environ.setdefault(key, value)
    try:
        import ray
        from ray import serve  # noqa: F401 (the extra's other half)
    except ImportError:
        print("redraft cluster: Ray Serve is not installed; pip install 'redraft[cluster]'", file=sys.stderr)
        return EXIT_USAGE
    from . import app
    try:
        config = cluster_config(args)
        _check_host(args.host, args.token)
    except ValueError as e:
        print(f"redraft cluster: {e}", file=sys.stderr)
        return EXIT_USAGE

    ray.init(**local_ray(address))
    previous = signal.signal(signal.SIGTERM, _interrupt)
    code = 0
    try:
        if args.num_gpus is None:
            config = _with_gpus(config, 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0)
        url = app.deploy(config, args.host, args.port)
        size = (f"{config.autoscale[0]}-{config.autoscale[1]} replicas" if config.autoscale
                else f"{config.replicas} replica{'s' * (config.replicas > 1)}")
        print(f"redraft cluster: serving on {url} ({size}, {config.num_cpus:g} CPU / {config.num_gpus:g} GPU each); "
              f"health at {url}{app.HEALTH}; Ctrl-C stops it", flush=True)
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    except RuntimeError as e:  # Serve could not start the replicas (a missing model, too few CPUs)
        print(f"redraft cluster: {app.failure(e)}", file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            app.teardown(shutdown_serve=address is None)
        finally:
            ray.shutdown()
        print("redraft cluster: stopped", file=sys.stderr, flush=True)
    return code


def local_ray(address: str | None) -> dict:
    """ray.init's arguments: joining a cluster takes its settings; a Ray of our own has no
    dashboard, no metrics exporter, and (LOCAL_ENV) listens on loopback, behind Ray's token."""
    common = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": False}
    if address is not None:
        return {"address": address, **common}
    return {**common, "dashboard_host": "127.0.0.1", "_system_config": dict(LOCAL_SYSTEM_CONFIG)}


def cluster_config(args):
    """The deployment's settings from the arguments; ValueError names a bad one."""
    from .app import ClusterConfig  # (imports ray: only once the command runs)
    autoscale = None
    if args.autoscale is not None:
        try:
            low, high = (int(n) for n in args.autoscale.split(","))
        except ValueError:
            raise ValueError(f"--autoscale takes MIN,MAX (two integers), got {args.autoscale!r}") from None
        autoscale = (low, high)
    threads = args.threads or max(1, int(args.num_cpus))
    return ClusterConfig(model=args.model, replicas=args.replicas, autoscale=autoscale, num_cpus=args.num_cpus,
                         num_gpus=args.num_gpus or 0.0, threads=threads, dtype=args.dtype,
                         max_ongoing_requests=args.max_ongoing_requests, token=args.token)


def _with_gpus(config, gpus: float):
    from dataclasses import replace
    return replace(config, num_gpus=gpus)


def _check_host(host: str, token: str | None) -> None:
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        local = False
    if not local and not token:
        raise ValueError(f"refusing to serve on {host} without --token: anyone who reaches it could run the "
                         f"model; pass --token TOKEN, and put a TLS proxy in front of anything beyond loopback")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
