"""What the cluster tests share: the Ray daemons running on this machine, from /proc."""

from __future__ import annotations

import os
import socket

DAEMONS = ("raylet", "gcs_server")


def ray_processes() -> set[int]:
    """PIDs of the Ray daemons (raylet, gcs_server) on this machine."""
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:  # gone meanwhile
            continue
        if name in DAEMONS:
            out.add(int(pid))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
