"""The `redraft` command: serve LSP, complete at a file position, evaluate infill, train,
download a checkpoint, check the installation (doctor).

Positions are FILE:LINE:COL as compilers print them: 1-based line, 1-based character column,
the cursor just before character COL (COL = length + 1 is the end of the line).

The eval commands live in cli_eval.py, what the commands share in cli_common.py.
Commands import what they use when they run: importing torch is most of a `complete`, and
`--help` or a bad argument should not wait for it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from . import doctor
from .cli_common import EXIT_USAGE, UserError, cache_arg, load_engine, model_args, names_arg, print_json
from .cli_eval import eval_parser
from .cluster import command as cluster_command
from .core.repetition import loop_start
from .http import DEFAULT_PORT

def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_USAGE
    if "torch" not in sys.modules:  # read once, when torch is first imported
        # One intra-op thread unless the user says otherwise: a second thread that loses its core
        # to a browser or a build stalls every step (2.0-2.6x slower beside one or two busy
        # processes; quiet, one thread costs 1.3-1.5x; tests/bench/bench_threads.py).
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        code = args.run(args)
    except UserError as e:
        print(f"redraft: {e}", file=sys.stderr)
        code = EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    if argv is None and getattr(args, "quick_exit", False):
        _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End a finished command without the interpreter's teardown, which with torch loaded
    takes longer than a whole `complete` answer (1.3-1.7 s measured on the 2-core machine,
    after every exit handler had run). Only for commands whose output is all written."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (`| head`): nothing more to say
        pass
    os._exit(code)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="redraft", description="Local edit prediction with a diffusion code model.")
    p.add_argument("--version", action="version", version=f"redraft {_version()}")
    sub = p.add_subparsers(metavar="COMMAND")

    sv = sub.add_parser("serve", help="run the language server (stdio, or --tcp PORT on 127.0.0.1), "
                                      "or the HTTP API (--http [PORT])")
    sv.add_argument("--tcp", type=int, default=None, metavar="PORT", help="listen on 127.0.0.1:PORT instead of stdio")
    sv.add_argument("--http", type=int, nargs="?", const=DEFAULT_PORT, default=None, metavar="PORT",
                    help=f"serve the HTTP API (Ollama, OpenAI and Inception routes) on PORT (default "
                         f"{DEFAULT_PORT}) instead of LSP")
    sv.add_argument("--stdio", action="store_true",
                    help="with --http: serve LSP on stdin/stdout too, in the same process (one model in memory)")
    sv.add_argument("--host", default=None, help="address the HTTP API binds (default 127.0.0.1; another one "
                                                 "needs --token)")
    sv.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                    help="with --http on loopback: answer requests naming this Host too (NAME, or NAME:PORT; "
                         "repeatable; '*' answers any, and needs --token). Default: localhost, 127.0.0.1, [::1]")
    sv.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                    help="with --http: answer web pages of this origin (e.g. https://app.example; repeatable). "
                         "Default: none, every request with an Origin header is refused")
    sv.add_argument("--engine-routes", action="store_true",
                    help="with --http: serve the engine protocol (/v1/redraft/engine/...) without a token "
                         "(with --token it is served to clients that send it)")
    sv.add_argument("--token", default=None, help="bearer token every HTTP request must carry "
                                                  "(Authorization: Bearer TOKEN), and the token a --tcp client "
                                                  "sends in initialize; with --engine-url, also the token sent to "
                                                  "the engine. `ps` shows it: prefer --token-file or REDRAFT_TOKEN")
    sv.add_argument("--token-file", default=None, metavar="PATH",
                    help="read the --token from PATH (mode 0600 or 0400; one a group or others can read is refused)")
    sv.add_argument("--engine-token-file", default=None, metavar="PATH",
                    help="with --engine-url: read the token sent to the engine from PATH (or REDRAFT_ENGINE_TOKEN; "
                         "default: the --token)")
    sv.add_argument("--engine-url", default=None, metavar="URL",
                    help="use the engine of another redraft server (`redraft serve --http` on a GPU box, or "
                         "the cluster) at URL instead of loading a model here")
    sv.add_argument("--engine-timeout", type=float, default=None, metavar="S",
                    help="with --engine-url: seconds a request to the engine may take before drafts answer "
                         "instead (default 10)")
    model_args(sv)
    sv.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                    help="a folder of model checkpoints the editor's settings may name as `model` (repeatable; "
                         "shipped names, pulled ids and --model need none)")
    sv.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                    help="files never read, on top of the secret files (repeatable); the editor's settings add "
                         "to these, never remove them")
    sv.add_argument("--exclude-secrets", choices=["on", "off"], default="on",
                    help="never read the usual secret files: .env, keys, credentials (default on; only this "
                         "option turns it off)")
    sv.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                    help="log level on stderr (default WARNING)")
    sv.set_defaults(run=_serve)
    _complete_parser(sub)
    eval_parser(sub)

    _train_parser(sub)

    pl = sub.add_parser("pull", help="download a checkpoint from the Hugging Face Hub (safetensors only)")
    pl.add_argument("repo_id", metavar="HF_ID")
    pl.set_defaults(run=_pull)

    dr = sub.add_parser("doctor", help="check the installation: Python, torch, device and dtype, the model, "
                                       "the tree-sitter grammars")
    model_args(dr)
    dr.set_defaults(run=lambda args: doctor.run(args), quick_exit=True)

    cl = sub.add_parser("cluster", help="serve the engine from Ray Serve replicas, a document's requests on one "
                                        "replica (needs the cluster extra; README: Team scale)")
    cluster_command.arguments(cl)
    cl.set_defaults(run=cluster_command.run)
    return p


TRAIN_STEPS = {  # step: (module in engine/training, what it does)
    "corpus": ("corpus", "collect the source files of permissive packages, split by package"),
    "tokenizer": ("tokenizer", "train the byte-level BPE tokenizer on the corpus' training split"),
    "model": ("train", "train the autoregressive twin, then the diffusion model"),
    "distill": ("distill", "write the twin's own spans, the diffusion model's distillation targets"),
    "ship": ("ship", "copy a training checkpoint into the package as a shipped model"),
}


def _train_parser(sub) -> None:
    steps = "\n".join(f"  {name:<10} {what}" for name, (_, what) in TRAIN_STEPS.items())
    tr = sub.add_parser("train", help="build the corpus, the tokenizer, or train a model (docs/models-and-training.md)",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description=f"Train redraft's default model on this machine, in steps:\n{steps}\n\n"
                                    f"Each step has its own options: redraft train STEP --help")
    # (every argument after STEP, --help included, is the step's: the training modules parse them)
    tr.add_argument("step", nargs="?", choices=list(TRAIN_STEPS), metavar="STEP", help=", ".join(TRAIN_STEPS))
    tr.add_argument("rest", nargs=argparse.REMAINDER, metavar="ARGS", help="the step's own arguments")
    tr.set_defaults(run=_train, train_help=tr.print_help)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("redraft")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _complete_parser(sub) -> None:
    c = sub.add_parser("complete", help="complete the code at FILE:LINE:COL and print the text")
    c.add_argument("position", metavar="FILE:LINE:COL")
    model_args(c)
    c.add_argument("--span", type=int, default=None, help="span budget in tokens (default: the server's, "
                                                          "16 for a line, 48 for a block)")
    c.add_argument("--threshold", type=float, default=None,
                   help="unmasking confidence threshold (default: the model's, else 0.9)")
    c.add_argument("--drafts", choices=["seeded", "only", "off"], default="seeded",
                   help="drafts from the file itself: seed the model with them (default), use them alone, "
                        "or not at all")
    cache_arg(c)
    names_arg(c)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--json", action="store_true", help="print one JSON object with text and stats")
    c.add_argument("--timings", action="store_true",
                   help="say on stderr where the time went (start-up, snapshot, drafts, import, load, engine)")
    c.set_defaults(run=_complete, quick_exit=True)


def parse_position(position: str) -> tuple[Path, int, int]:
    parts = position.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        raise UserError(f"expected FILE:LINE:COL with 1-based numbers, got {position!r}")
    return Path(parts[0]), int(parts[1]), int(parts[2])


def split_at(text: str, line: int, col: int) -> tuple[str, str]:
    """Prefix and suffix of `text` around the cursor at 1-based (line, col)."""
    lines = text.splitlines(keepends=True) or [""]
    if text.endswith(("\n", "\r")):
        lines.append("")  # the empty last line after a final newline is a valid position
    if not 1 <= line <= len(lines):
        raise UserError(f"line {line} is outside the file (1..{len(lines)})")
    body = lines[line - 1].rstrip("\r\n")
    if not 1 <= col <= len(body) + 1:
        raise UserError(f"column {col} is outside line {line} (1..{len(body) + 1})")
    offset = sum(len(s) for s in lines[: line - 1]) + col - 1
    return text[:offset], text[offset:]


def _serve(args) -> int:
    import logging

    from .core.settings import ServerConfig, parse
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="redraft %(levelname)s %(name)s: %(message)s")
    if args.tcp is not None and not 0 < args.tcp < 65536:
        raise UserError(f"--tcp needs a port in 1..65535, got {args.tcp}")
    _tokens(args)
    host = _http_host(args) if args.http is not None else None
    args.access = _http_access(args)
    device = _serve_device(args.device) if args.engine_url is None else args.device
    config, problems = parse({"model": args.model, "device": device, "dtype": args.dtype,
                              "engineUrl": args.engine_url, "modelsDirs": args.models_dir, "exclude": args.exclude,
                              "excludeSecrets": args.exclude_secrets == "on"}, ServerConfig())
    if problems:
        raise UserError("; ".join(problems))
    inference = _inference(args)
    if args.http is None:
        from .lsp.server import build_server
        server = build_server(config, inference=inference)
        if args.tcp is not None:
            _serve_tcp(server, args)
        else:
            if sys.stdin.isatty():  # a person at a terminal, not an editor: say what it waits for
                print("redraft: waiting for an LSP client on stdin/stdout (editors start this command; "
                      "Ctrl-C stops). For the HTTP API: redraft serve --http [PORT]", file=sys.stderr, flush=True)
            server.start_io()
        return 0
    return _serve_http(args, config, host, inference)


def _serve_device(device: str) -> str:
    """The device `serve` loads the model on: the one asked for, or the CPU (with one message)
    where this torch cannot run on it, as a server that answers slower beats one that answers
    nothing. This imports torch before serving: only for a device other than the CPU."""
    if device == "cpu":
        return device
    from redraft.engine import EngineError, check_device
    try:
        check_device(device)
    except EngineError as e:
        print(f"redraft: {e}; serving on the CPU instead", file=sys.stderr, flush=True)
        return "cpu"
    return device


def _inference(args):
    """The Inference every front of `serve` shares; with --engine-url, how it reaches the engine."""
    from .core.inference import Inference
    from .core.remote import TIMEOUT_S
    if args.engine_timeout is not None and args.engine_url is None:
        raise UserError("--engine-timeout applies to a remote engine: add --engine-url URL")
    timeout = TIMEOUT_S if args.engine_timeout is None else args.engine_timeout
    if not 0 < timeout <= 600:
        raise UserError(f"--engine-timeout needs seconds in (0, 600], got {timeout:g}")
    return Inference(engine_token=args.engine_token, engine_timeout_s=timeout)


def _tokens(args) -> None:
    """args.token (the clients', from --token, --token-file or REDRAFT_TOKEN) and
    args.engine_token (the remote engine's), after checking where they may apply."""
    from .cli_tokens import client_token, engine_token
    token, chosen = client_token(args.token, args.token_file)
    if args.http is None and args.host is not None:
        raise UserError("--host applies to the HTTP API: add --http [PORT]")
    if chosen and args.http is None and args.tcp is None and args.engine_url is None:
        raise UserError("--token and --token-file apply to the HTTP API (--http) and LSP over TCP (--tcp)")
    if args.engine_token_file is not None and args.engine_url is None:
        raise UserError("--engine-token-file applies to a remote engine: add --engine-url URL")
    args.token = token
    args.engine_token = engine_token(args.engine_token_file, token) if args.engine_url else None


def _serve_tcp(server, args) -> None:
    """LSP on 127.0.0.1:PORT for one client at a time, which must send the token in
    `initialize` (a new random one, printed once, unless the user chose one)."""
    from .cli_tokens import generate
    token, generated = (args.token, False) if args.token else (generate(), True)

    def started(listener) -> None:
        where = f"127.0.0.1:{args.tcp}"
        said = (f"token for initializationOptions.token (new each start; --token-file or REDRAFT_TOKEN "
                f"chooses one): {token}" if generated else "clients send the token in initializationOptions.token")
        print(f"redraft: LSP on {where}, one client at a time; {said}", file=sys.stderr, flush=True)
    try:
        server.start_tcp("127.0.0.1", args.tcp, token=token, started=started)
    except OSError as e:
        raise UserError(f"cannot listen on 127.0.0.1:{args.tcp}: {e.strerror or e}") from None


def _http_host(args) -> str:
    """The address the HTTP API binds, after checking the HTTP options."""
    import ipaddress
    if args.tcp is not None:
        raise UserError("--http and --tcp cannot be combined (use --stdio for LSP beside the HTTP API)")
    if not 0 < args.http < 65536:
        raise UserError(f"--http needs a port in 1..65535, got {args.http}")
    host = args.host or "127.0.0.1"
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        local = False
    if not local and not args.token:
        raise UserError(f"refusing to serve HTTP on {host} without --token: anyone who reaches it could run "
                        f"the model; pass --token-file FILE or set REDRAFT_TOKEN (clients send 'Authorization: Bearer TOKEN') or "
                        f"bind 127.0.0.1")
    return host


def _http_access(args):
    """The HTTP API's Access (http/access.py) from --allow-host, --allow-origin, --engine-routes."""
    if args.http is None:
        if args.allow_host or args.allow_origin or args.engine_routes:
            raise UserError("--allow-host, --allow-origin and --engine-routes apply to the HTTP API: add --http [PORT]")
        return None
    if "*" in (h.strip() for h in args.allow_host) and not args.token:
        raise UserError("--allow-host '*' answers any Host name, so any web page could reach the API through DNS "
                        "rebinding: it needs --token (or name the hosts)")
    for origin in args.allow_origin:
        if origin.strip() == "*" or not origin.strip():
            raise UserError(f"--allow-origin needs an origin such as https://app.example, got {origin!r}")
    from .http.access import Access
    return Access(tuple(args.allow_host), tuple(args.allow_origin), args.engine_routes)


def _serve_http(args, config, host: str, inference) -> int:
    """The HTTP API, alone (until Ctrl-C) or beside LSP on stdio (until the client exits); one
    Inference either way: one engine, one model in memory."""
    import threading

    from .http.app import build_app, listen, make_server
    try:
        sock = listen(host, args.http)
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{args.http}: {e.strerror or e}") from None
    loading = inference.load(config.model, config.device, config.dtype, url=config.engine_url)
    server = make_server(build_app(inference, config, token=args.token, access=args.access), args.log_level)
    try:
        if not args.stdio:
            error = loading.result()  # a model that cannot load ends the command before it serves
            if error:
                raise UserError(error)
            if inference.load_error:  # a remote engine that does not answer yet: tried again per request
                print(f"redraft: {inference.load_error}", file=sys.stderr, flush=True)
            print(f"redraft: {inference.engine.name} answering at {_address(sock)} (Ctrl-C stops)",
                  file=sys.stderr, flush=True)
            server.run(sockets=[sock])
            return 0
        from .lsp.server import build_server
        http = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="redraft-http", daemon=True)
        http.start()
        print(f"redraft: HTTP API at {_address(sock)}, LSP on stdio", file=sys.stderr, flush=True)
        try:
            build_server(config, inference=inference).start_io()  # returns when the client exits
        finally:
            server.should_exit = True
            http.join(timeout=5)
        return 0
    finally:
        sock.close()
        inference.shutdown()


def _address(sock) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _complete(args) -> int:
    """What the server would show at FILE:LINE:COL: its snapshot, drafts, engine call and
    post-processing, on the file as it is on disk. The model loads on a thread meanwhile."""
    clock = _Clock()
    path, line, col = parse_position(args.position)
    from .core.settings import ServerConfig
    if ServerConfig().excludes(str(path.resolve())):  # as the server: a secret file is never read
        raise UserError(f"{path}: a secret file (.env, keys, credentials): redraft never reads it")
    if path.exists() and not path.is_file():  # a FIFO would block the read forever
        raise UserError(f"{path}: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (UnicodeDecodeError, IsADirectoryError, PermissionError) as e:
        raise UserError(f"{path}: cannot read as UTF-8 text ({e.__class__.__name__})") from None
    prefix, _ = split_at(text, line, col)
    engine = None if args.drafts == "only" else _Loading(args, clock)
    from .core.context import own_drafts, text_snapshot
    from .core.settings import ServerConfig, parse

    options = {"drafts": args.drafts, "threshold": args.threshold, "cache": args.cache == "on",
               "names": args.names == "on"}
    if args.span is not None:
        options.update(lineTokens=args.span, blockTokens=args.span)
    config, problems = parse(options, ServerConfig())
    if problems:
        raise UserError("; ".join(problems))
    snap, doc = text_snapshot(path.resolve().as_uri(), text, len(prefix), config, path=str(path))
    clock.lap("snapshot")
    snap = own_drafts(snap, doc, config)
    clock.lap("drafts")
    if engine is not None:
        engine = engine.result()
        engine.with_sampler(seed=args.seed)
        clock.lap("waiting for the model")
    from .core.inference import answer as answer_snapshot
    clock.lap("import (pipeline)")
    answer = answer_snapshot(engine, snap)  # nothing where the server answers nothing (a string...)
    shown = "" if answer.edit is None else answer.edit.text
    engine_ms = answer.stats.total_ms if answer.stats is not None else 0.0
    clock.lap("answer", engine_ms)
    clock.laps["engine"] = engine_ms
    if args.json:
        s = answer.stats
        data = {"text": shown, "replace": 0 if answer.edit is None else answer.edit.replace,
                "mode": snap.mode.value, "reason": snap.reason, "source": answer.source,
                "abstained": answer.abstained, "raw": answer.raw, "model": None if engine is None else engine.name}
        if s is not None:
            data.update(ms=round(s.total_ms, 3), steps=s.steps, forwards=s.forwards, context_tokens=s.context_tokens,
                        span_tokens=s.span_tokens, stats=s.as_dict())
        if args.timings:
            data["timings_ms"] = clock.summary()
        print_json(data)
    else:
        sys.stdout.write(shown + ("" if shown.endswith("\n") else "\n"))
    if answer.edit is None:  # the empty line is the answer; stderr says why there was nothing
        print(f"redraft: nothing to suggest here: {_why_nothing(snap, answer)}", file=sys.stderr)
    if args.timings:
        print("redraft: timings: " + ", ".join(f"{k} {v:.0f} ms" for k, v in clock.summary().items()),
              file=sys.stderr)
    return 0


class _Clock:
    """Where a command's time goes, in milliseconds: laps on the main thread, and the model's
    import and load on its thread (which overlap the snapshot and drafts)."""

    def __init__(self) -> None:
        self.start_up = _process_age_ms()  # before `main`: the interpreter, site-packages, this module
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str, minus: float = 0.0) -> None:
        now = time.perf_counter()
        self.laps[name] = (now - self.t) * 1000 - minus
        self.t = now

    def summary(self) -> dict[str, float]:
        out = {} if self.start_up is None else {"start-up": self.start_up}
        out.update(self.laps)
        total = _process_age_ms()
        if total is not None:
            out["total"] = total
        return {k: round(v, 1) for k, v in out.items()}


def _process_age_ms() -> float | None:
    """Milliseconds since this process started (Linux, 10 ms steps); None elsewhere."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, (uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")) * 1000)
    except (OSError, ValueError, IndexError):
        return None


class _Loading:
    """The engine, imported and loaded on a thread while the caller parses the file; a
    UserError (a model that cannot load) is raised by `result`."""

    def __init__(self, args, clock: _Clock) -> None:
        import threading
        self.args, self.clock, self.error, self.engine = args, clock, None, None
        self.thread = threading.Thread(target=self._run, name="redraft-load", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            t0 = time.perf_counter()
            from redraft.engine import Engine  # noqa: F401  (torch: the import is timed apart from the load)
            t1 = time.perf_counter()
            self.engine = load_engine(self.args)
            t2 = time.perf_counter()
            self.clock.laps["import (thread)"] = (t1 - t0) * 1000
            self.clock.laps["load (thread)"] = (t2 - t1) * 1000
        except BaseException as e:  # handed to the main thread
            self.error = e

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.engine


def _why_nothing(snap, answer) -> str:
    if snap.mode.value == "none":
        return f"the server does not complete at this position ({snap.reason})"
    if answer.abstained:
        return "the model found no candidate likely enough to show"
    if answer.ran_model and loop_start(answer.raw) is not None:
        return "what the model wrote ends in a loop (the same few tokens over and over)"
    if answer.ran_model:
        return "what the model wrote was dropped (it repeats the text after the cursor, or adds a parse error)"
    return "no draft (no earlier match of the text before the cursor) and no model"


def _train(args) -> int:
    """Delegates to the training modules, which own their arguments (`redraft train model --help`)."""
    from importlib import import_module
    if args.step is None:
        args.train_help(sys.stderr)
        return EXIT_USAGE
    module = TRAIN_STEPS[args.step][0]
    return import_module(f"redraft.engine.training.{module}").main(args.rest)


def _pull(args) -> int:
    try:
        from redraft.engine import pull
        path = pull(args.repo_id)
    except ImportError:
        raise UserError("`redraft pull` needs huggingface-hub: pip install 'redraft[hub]'") from None
    except Exception as e:  # network or hub errors, reported as they are
        raise UserError(f"could not download {args.repo_id}: {e}") from None
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
