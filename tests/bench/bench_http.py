"""HTTP benchmark: single-line completions through each route of `redraft serve --http`.

    python tests/bench/bench_http.py [--file some/heldout/module.py] [--n 30] [--model redraft-diffusion]

Cursor samples: --n lines of the file (evenly spaced) that assign or return something, the
cursor after their `= ` or `return `, the rest of the line removed; the client sends the 60
lines above and 20 below, about what Zed's FIM providers send (~512 tokens). Every route gets
the same samples in the same order, as the bodies its clients send: /api/generate as Zed's
ollama provider (starcoder template, num_predict 64, temperature 0.2, its stop list),
/v1/completions as Zed's open_ai_compatible_api provider (qwen template, max_tokens 64),
/v1/fim/completions as prompt + suffix, /v1/edit/completions as a Mercury prompt whose
code_to_edit region is the cursor's line as it was. Each request is timed at the client, and
the server reports its engine call's wall time (`Server-Timing: engine;dur=MS`: `run_engine`
with windows and post-processing, or the edit route's `rewrite`); the overhead is the
difference per request: JSON, HTTP, the hand-off to the inference thread, the snapshot and the
drafts lookup.

For comparison the same calls then run directly in this process on the same model
(`run_engine` on the snapshot the server builds, `rewrite` for the edit route), in the same
order so that the context cache sees the same sequence; `snapshot` is the time to build the
snapshot and look up drafts. WARM_UP requests per route are not counted. The default file is
the `requests` package vendored by pip (held out from the shipped model's training).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from redraft.engine import CancelFlag
from redraft.server.http import templates
from redraft.server.http.engine import fim_snapshot, rewrite
from redraft.server.core.inference import Inference, run_engine
from redraft.server.core.settings import ServerConfig

ZED_OLLAMA_STOPS = ["<|endoftext|>", "<|file_separator|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_middle|>",
                    "<|fim_suffix|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<PRE>", "<SUF>", "<MID>",
                    "[PREFIX]", "[SUFFIX]"]
ZED_QWEN_STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"]
ABOVE, BELOW = 60, 20
WARM_UP = 3  # requests per route before the timed ones


def samples(text: str, n: int) -> list[tuple[str, str, str]]:
    """(prefix, suffix, the cursor line as it was) at --n assignment / return lines."""
    lines = text.splitlines(keepends=True)
    found = []
    for i, line in enumerate(lines):
        m = re.search(r"(?<![=!<>])= (?=\S)|\breturn (?=\S)", line)
        if m and not line.lstrip().startswith("#"):
            found.append((i, m.end()))
    picked = [found[round(k * (len(found) - 1) / max(1, n - 1))] for k in range(min(n, len(found)))]
    out = []
    for i, at in picked:
        prefix = "".join(lines[max(0, i - ABOVE):i]) + lines[i][:at]
        suffix = "\n" + "".join(lines[i + 1:i + 1 + BELOW])
        out.append((prefix, suffix, lines[i]))
    return out


def bodies(model: str, prefix: str, suffix: str, line: str) -> dict[str, dict]:
    before = prefix[:prefix.rfind("\n") + 1]
    mercury = (f"<|current_file_content|>\ncurrent_file_path: bench.py\n{before}<|code_to_edit|>\n"
               f"{prefix[len(before):]}<|cursor|>{line[len(prefix) - len(before):]}<|/code_to_edit|>\n"
               f"{suffix[1:]}<|/current_file_content|>\n")
    return {
        "/api/generate": {"model": model, "prompt": f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>",
                          "raw": True, "stream": False,
                          "options": {"num_predict": 64, "temperature": 0.2, "stop": ZED_OLLAMA_STOPS}},
        "/v1/completions": {"model": model, "prompt": f"<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>",
                            "max_tokens": 64, "stop": ZED_QWEN_STOPS},
        "/v1/fim/completions": {"model": model, "prompt": prefix, "suffix": suffix, "max_tokens": 64},
        "/v1/edit/completions": {"model": model, "messages": [{"role": "user", "content": mercury}]},
    }


def direct(inference: Inference, config: ServerConfig, route: str, body: dict) -> tuple[float, float]:
    """(ms to build the snapshot, ms of the engine call) for what the route runs on `body`."""
    engine = inference.engine

    def job():
        t0 = time.perf_counter()
        if route == "/v1/edit/completions":
            ep, p = templates.edit_prompt(body)
            t1 = time.perf_counter()
            rewrite(inference, ep, p, config, CancelFlag())
            return 0.0, (time.perf_counter() - t1) * 1000
        fim, p = templates.ollama_params(body) if route == "/api/generate" else templates.openai_params(body)
        snap = fim_snapshot(fim.prefix, fim.suffix, config, p.language)
        sampler = engine.config.sampler
        if p.temperature is not None:
            sampler = sampler.with_(temperature=p.temperature)
        t1 = time.perf_counter()
        run_engine(engine, snap, CancelFlag(), sampler=sampler)
        return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000
    return inference.executor.submit(job).result()


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(xs, q)), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", type=Path, default=None,
                    help="a Python file (default: pip's vendored requests/sessions.py)")
    ap.add_argument("--n", type=int, default=30, help="samples per route (default 30)")
    ap.add_argument("--model", default="redraft-diffusion")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.file is None:
        import pip._vendor.requests.sessions as vendored
        args.file = Path(vendored.__file__)
    cases = samples(args.file.read_text(encoding="utf-8"), args.n)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "redraft.server.cli", "serve", "--http", str(port),
                               "--model", args.model], stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        client = httpx.Client(timeout=60)
        for _ in range(600):
            try:
                model = client.get(f"{url}/v1/models").json()["data"][0]["id"]
                break
            except httpx.TransportError:
                assert server.poll() is None, "the server exited"
                time.sleep(0.1)
        http: dict[str, list[tuple[float, float]]] = {}  # route -> (client ms, the server's engine ms)
        for route in bodies(model, *cases[0]):
            for case in cases[-WARM_UP:]:
                client.post(url + route, json=bodies(model, *case)[route]).raise_for_status()
            http[route] = []
            for case in cases:
                t0 = time.perf_counter()
                r = client.post(url + route, json=bodies(model, *case)[route])
                ms = (time.perf_counter() - t0) * 1000
                r.raise_for_status()
                http[route].append((ms, float(r.headers["server-timing"].split("dur=")[1])))
    finally:
        server.terminate()
        server.wait(timeout=30)

    inference = Inference()
    error = inference.load(args.model, "cpu", "auto").result()
    assert error is None, error
    config = ServerConfig()
    report = {"file": str(args.file), "n": len(cases), "model": model, "routes": {}}
    for route in http:
        for case in cases[-WARM_UP:]:
            direct(inference, config, route, bodies(model, *case)[route])
        snap_ms, engine_ms = zip(*(direct(inference, config, route, bodies(model, *c)[route]) for c in cases))
        client_ms, server_ms = zip(*http[route])
        over = [c - e for c, e in zip(client_ms, server_ms)]
        report["routes"][route] = {
            "http_p50": pct(client_ms, 50), "http_p95": pct(client_ms, 95),
            "server_engine_p50": pct(server_ms, 50), "overhead_p50": pct(over, 50), "overhead_p95": pct(over, 95),
            "direct_p50": pct(engine_ms, 50), "direct_p95": pct(engine_ms, 95), "snapshot_p50": pct(snap_ms, 50)}
    inference.shutdown()

    head = ("route", "HTTP p50", "p95", "its engine p50", "overhead p50", "p95", "direct p50", "p95", "snapshot p50")
    rows = [head] + [(route, *(f"{v:.1f}" for v in r.values())) for route, r in report["routes"].items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print(f"{report['model']}: {report['n']} single-line completions from {args.file.name}, ms, "
          f"{os.cpu_count()} cores")
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
