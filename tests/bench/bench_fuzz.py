"""Hostile LSP traffic at length: N fuzzed operations through the real `redraft serve`.

    python tests/bench/bench_fuzz.py [--ops 10000] [--model redraft-diffusion] [--seed 0] [--json OUT]

The operations are the ones tests/server/lsp/test_lsp_fuzz.py draws (fuzz_ops.py: edits with
valid and invalid ranges, huge / binary / surrogate-pair text, versions out of order,
requests at invalid positions, unknown methods, malformed params, cancels, reopen), drawn
here by hypothesis from a fixed seed (generation only, no search). After each program the
server's copy of the document is compared with the reference replay. Reports: operations
run, requests answered / unanswered (no answer within 30 s), process deaths, document
divergences, internal errors counted by the server, and answer latency p50 / p95 / p99 / max.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "server" / "lsp")]

import numpy as np  # noqa: E402
from lsprotocol import types as T  # noqa: E402
from pytest_lsp import ClientServerConfig  # noqa: E402

from fuzz_ops import URIS, Driver, programs  # noqa: E402
from lsp_helpers import CAPABILITIES, plain  # noqa: E402


def draw_programs(n_ops: int, seed: int) -> list:
    """Programs of fuzzed operations adding up to `n_ops`, reproducible from `seed`."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    out: list = []

    @hypothesis_seed(seed)
    @settings(max_examples=n_ops // 20 + 10, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(min_ops=20, max_ops=60))
    def collect(prog):
        if sum(len(p[2]) for p in out) < n_ops:
            out.append(prog)
    collect()
    return out


async def run(args) -> dict:
    cmd = [sys.executable, "-m", "redraft.server.cli", "serve"] + (["--model", args.model] if args.model else [])
    config = ClientServerConfig(server_command=cmd)
    client = await config.start()
    await client.initialize_session(T.InitializeParams(capabilities=CAPABILITIES, initialization_options={}))
    progs = draw_programs(args.ops, args.seed)
    driver = Driver(client)
    divergences = ops = 0
    t0 = time.perf_counter()
    for index, text, prog in progs:
        uri = URIS[index]
        driver.open(uri, text)
        await driver.run(uri, prog)
        ops += len(prog)
        if await driver.server_text(uri) != driver.refs[uri].text:
            divergences += 1
        if ops // 1000 != (ops - len(prog)) // 1000:
            print(f"{ops} operations, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    stats = plain(await client.protocol.send_request_async("redraft/stats", {}))
    alive = client._server is not None and client._server.returncode is None
    await client.shutdown_session()
    lat = np.array(driver.latencies) * 1000
    return {"operations": ops, "programs": len(progs), "requests_answered": len(lat),
            "unanswered": driver.unanswered, "process_alive": alive, "divergences": divergences,
            "internal_errors": stats["errors"], "errors_by_method": stats.get("errors_by_method", {}),
            "latency_ms": {q: round(float(np.percentile(lat, p)), 2) for q, p in
                           (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))},
            "wall_s": round(time.perf_counter() - t0, 1), "model": stats.get("model")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rep = asyncio.run(run(args))
    print(json.dumps(rep, indent=1))
    if args.json:
        args.json.write_text(json.dumps(rep, indent=1) + "\n")
    ok = rep["unanswered"] == 0 and rep["process_alive"] and rep["divergences"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
