"""`redraft doctor`: what this installation runs on, one line per part (Python, torch and
its build, the device and dtype the engine would pick, the model and its files, the
tree-sitter grammars), for a first run or a bug report. Imports what it checks when it runs.
"""

from __future__ import annotations

import sys
import time

EXIT_BROKEN = 1  # something essential does not work


def run(args) -> int:
    """What this installation runs on, one line per part, for a bug report or a first run: a part
    that does not work says FAILED and why, and the exit status is then 1. It loads the model
    once, as `complete` would (a few seconds, most of them importing torch)."""
    import platform
    failed: list[str] = []

    def say(part: str, text: str) -> None:
        print(f"{part:<9} {text}", flush=True)

    def fail(part: str, text: str) -> None:
        failed.append(part)
        say(part, f"FAILED: {text}")

    say("python", f"{platform.python_version()} ({sys.executable})")
    try:
        import torch
    except Exception as e:  # not installed, or a wheel that does not match this machine
        fail("torch", f"cannot import torch: {e}")
    else:
        gpu = torch.cuda.is_available()
        build = (f"CUDA {torch.version.cuda} build" if torch.version.cuda
                 else "ROCm build" if getattr(torch.version, "hip", None) else "CPU build")
        say("torch", f"{torch.__version__}, {build}, CUDA available: {'yes' if gpu else 'no'}"
                     + (f" ({torch.cuda.get_device_name(0)})" if gpu else ""))
        _model(args, say, fail, gpu)
    _grammars(say, fail)
    if failed:
        print(f"redraft: doctor: {', '.join(failed)} FAILED (see above)", file=sys.stderr)
        return EXIT_BROKEN
    print("redraft: doctor: all good", file=sys.stderr)
    return 0


def _model(args, say, fail, gpu: bool) -> None:
    from redraft.engine import DEFAULT_MODEL, Engine, EngineError
    from redraft.engine.checkpoint import resolve
    from redraft.engine.dtypes import auto_dtype, check_device
    try:
        check_device(args.device)
    except EngineError as e:  # a CPU build asked for CUDA, a GPU that is not there, a name torch does not know
        fail("device", str(e))
        return
    dtype = auto_dtype(args.device) if args.dtype == "auto" else args.dtype
    hint = "; --device cuda would use the GPU" if gpu and args.device == "cpu" else ""
    say("device", f"{args.device}, dtype {dtype}{' (auto)' if args.dtype == 'auto' else ''}{hint}")
    name = args.model or DEFAULT_MODEL
    try:
        folder = resolve(name)
        t0 = time.perf_counter()
        info = Engine.load(name, device=args.device, dtype=dtype).info()
        ms = (time.perf_counter() - t0) * 1000
    except (EngineError, ValueError, OSError, RuntimeError) as e:
        fail("model", f"{name} does not load: {e}")
        return
    say("model", f"{name}: {info.parameters / 1e6:.1f}M parameters, {info.dtype} on {info.device}, "
                 f"loads in {ms:.0f} ms")
    files = sorted(f for f in folder.iterdir() if f.is_file())
    say("files", f"{folder}: " + ", ".join(f"{f.name} ({_size(f.stat().st_size)})" for f in files))


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{max(1, round(n / 1024))} KiB"


def _grammars(say, fail) -> None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        from .core.languages import supported, syntax_for
    except ImportError as e:  # the tree-sitter runtime itself
        fail("grammars", f"cannot import tree-sitter: {e}")
        return
    try:
        runtime = version("tree-sitter")
    except PackageNotFoundError:
        runtime = "?"
    names = supported()
    loads = [n for n in names if syntax_for(n).grammar is not None]
    missing = [n for n in names if n not in loads]
    broken = f"; not installed or broken: {', '.join(missing)} (plain-text contexts there)" if missing else ""
    say("grammars", f"tree-sitter {runtime}: {', '.join(loads) or 'none'} load{broken}")
    if "python" in missing:
        fail("grammars", "the Python grammar does not load (pip install tree-sitter-python)")
