"""What the `redraft` command's modules share: the usage exit status, user errors, the model
and cache options, loading an engine, printing JSON."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_USAGE = 2


class UserError(Exception):
    """A problem with what the user asked for; printed without a traceback."""


def cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", choices=["on", "off"], default="off",
                   help="the cache model: tokens copied from matching code in the file mixed into the model's "
                        "predictions (default off, as in the server)")


def names_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--names", choices=["on", "off"], default="on",
                   help="complete a partly typed name from the names in the file where the model's answer "
                        "makes an unknown word of it (default on, as in the server; off for the model alone)")


def model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="checkpoint folder, shipped name, or pulled HF id "
                                                 "(default: the shipped redraft-diffusion)")
    p.add_argument("--device", default="cpu", help="where the model runs: cpu (default), cuda, cuda:N "
                                                    "(an NVIDIA GPU, with a CUDA build of torch) or mps")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 | int8 (CPU)")


def load_engine(args):
    from redraft.engine import DEFAULT_MODEL, Engine, EngineError, check_device
    try:
        check_device(args.device)
        return Engine.load(args.model or DEFAULT_MODEL, device=args.device, dtype=args.dtype)
    except (EngineError, ValueError) as e:
        raise UserError(str(e)) from None


def print_json(data) -> None:
    """One JSON document and a newline (a shell prompt or `jq -c` then starts on a line of its own)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    sys.stdout.flush()
