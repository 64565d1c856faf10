"""Hostile checkpoint folders: copies of tiny.py's redraft model with one thing crafted, and
a way to load many of them in one fresh process, timing each load and reading the process's
peak memory after it.

Each case is (craft(folder, outside), error class name, regular expression the message
matches); `outside` is a folder beside the model folders, for files a crafted link or index
points out to.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file


def edit_config(**changes):
    def craft(folder: Path, outside: Path) -> None:
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(cfg | changes))
    return craft


def config_text(old: str, new: str):
    """config.json with `old` replaced by `new` in its text (for values JSON itself cannot say)."""
    def craft(folder: Path, outside: Path) -> None:
        text = (folder / "config.json").read_text()
        assert old in text, (old, text)
        (folder / "config.json").write_text(text.replace(old, new, 1))
    return craft


def write(name: str, data: bytes | str):
    def craft(folder: Path, outside: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return craft


def fifo(name: str):
    def craft(folder: Path, outside: Path) -> None:
        (folder / name).unlink()
        os.mkfifo(folder / name)
    return craft


def unix_socket(name: str):
    def craft(folder: Path, outside: Path) -> None:
        (folder / name).unlink()
        s = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        try:
            os.chdir(folder)  # a relative name: a socket's path is limited to ~107 bytes
            s.bind(name)  # the file stays after the socket closes
        finally:
            os.chdir(here)
            s.close()
    return craft


def link(name: str, target: str | None = None):
    """`name` replaced by a link: to `target`, or to a copy of the file in `outside`."""
    def craft(folder: Path, outside: Path) -> None:
        to = target
        if to is None:
            to = str(outside / f"{folder.name}-{name}")
            shutil.copy(folder / name, to)
        (folder / name).unlink()
        (folder / name).symlink_to(to)
    return craft


def sparse(name: str, size: int):
    """`name` replaced by a file of `size` bytes that takes no room on disk."""
    def craft(folder: Path, outside: Path) -> None:
        with open(folder / name, "wb") as f:
            f.truncate(size)
    return craft


def index(entry):
    """An index whose weight_map sends every tensor to `entry(folder, outside)`."""
    def craft(folder: Path, outside: Path) -> None:
        names = list(load_file(folder / "model.safetensors"))
        target = entry(folder, outside)
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: target for n in names}}))
    return craft


def moved_out(folder: Path, outside: Path) -> str:
    """The weights moved out of the folder; their absolute path."""
    to = outside / f"{folder.name}.safetensors"
    shutil.move(folder / "model.safetensors", to)
    return str(to)


def dotdot(folder: Path, outside: Path) -> str:
    return "../" + os.path.relpath(moved_out(folder, outside), folder.parent)


def linked_shard(folder: Path, outside: Path) -> str:
    (folder / "shard.safetensors").symlink_to(moved_out(folder, outside))
    return "shard.safetensors"


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes | None]]) -> None:
    """A safetensors file written field by field; a tensor without bytes is left as a hole (sparse)."""
    sizes = {"F32": 4, "BF16": 2, "F16": 2, "I8": 1}
    header, at = {}, 0
    for name, (dtype, shape, _) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, (_, _, data) in tensors.items():
            start, end = header[name]["data_offsets"]
            if data is not None:
                f.seek(8 + len(raw) + start)
                f.write(data)
        f.truncate(8 + len(raw) + at)


def _tensors(folder: Path) -> dict:
    state = load_file(folder / "model.safetensors")
    return {k: ("F32", list(v.shape), v.float().contiguous().numpy().tobytes()) for k, v in state.items()}


def extra_tensor(nbytes: int):
    """The weights plus a tensor the model lacks, of `nbytes` (a hole on disk)."""
    def craft(folder: Path, outside: Path) -> None:
        tensors = _tensors(folder) | {"junk.weight": ("BF16", [nbytes // 2], None)}
        write_safetensors(folder / "model.safetensors", tensors)
    return craft


def retyped(name: str):
    """The weights with `name` stored as I8 of its shape."""
    def craft(folder: Path, outside: Path) -> None:
        tensors = _tensors(folder)
        _, shape, _ = tensors[name]
        n = 1
        for d in shape:
            n *= d
        tensors[name] = ("I8", shape, b"\1" * n)
        write_safetensors(folder / "model.safetensors", tensors)
    return craft


def huge_header(folder: Path, outside: Path) -> None:
    """A safetensors file that declares a 1 GiB header (and is that long, as holes)."""
    with open(folder / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", 1 << 30) + b'{"a": ')
        f.truncate(8 + (1 << 30))


def split_twice(folder: Path, outside: Path) -> None:
    """The weights in two files (no index) that both hold model.norm.weight."""
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    save_file(state, folder / "a.safetensors", metadata={"format": "pt"})
    save_file({"model.norm.weight": state["model.norm.weight"]}, folder / "b.safetensors", metadata={"format": "pt"})


# name -> (craft, error class, message pattern)
CASES = {
    # config.json: shapes and constants bounded before anything is built
    "layers-10M": (edit_config(num_hidden_layers=10_000_000), "InvalidConfigError",
                   r"config\.json: num_hidden_layers=10000000 must be a whole number in 1\.\.512"),
    "layers-inf": (config_text('"num_hidden_layers": 2', '"num_hidden_layers": 1e400'), "InvalidConfigError",
                   r"config\.json: a value has the wrong type or range \(cannot convert float infinity to integer\)"),
    "hidden-2^40": (edit_config(hidden_size=1 << 40), "InvalidConfigError",
                    r"hidden_size=1099511627776 must be a whole number in 1\.\.65536"),
    "intermediate-huge": (edit_config(intermediate_size=1 << 31), "InvalidConfigError",
                          r"intermediate_size=2147483648 must be a whole number in 1\.\.262144"),
    "vocab-huge": (edit_config(vocab_size=1 << 31), "InvalidConfigError",
                   r"vocab_size=2147483648 must be a whole number in 1\.\.1048576"),
    "positions-huge": (edit_config(max_position_embeddings=1 << 40), "InvalidConfigError",
                       r"max_position_embeddings=1099511627776 must be a whole number in 1\.\.16777216"),
    "heads-huge": (edit_config(num_attention_heads=1 << 20, num_key_value_heads=1 << 20, head_dim=2),
                   "InvalidConfigError", r"num_attention_heads=1048576 must be a whole number in 1\.\.1024"),
    "kv-heads-3": (edit_config(num_key_value_heads=3), "InvalidConfigError",
                   r"num_attention_heads=4 must be a multiple of num_key_value_heads=3"),
    "head-dim-odd": (edit_config(head_dim=15), "InvalidConfigError", r"head_dim=15 must be even"),
    "hidden-66": (edit_config(hidden_size=66), "InvalidConfigError",
                  r"hidden_size=66 is not a multiple of the 4 attention heads"),
    "mask-10^12": (edit_config(mask_token_id=10 ** 12), "InvalidConfigError",
                   r"mask_token_id=1000000000000 is outside the vocabulary \(0\.\.368\)"),
    "mask-negative": (edit_config(mask_token_id=-1), "InvalidConfigError",
                      r"mask_token_id=-1 is outside the vocabulary \(0\.\.368\)"),
    "eos-5000": (edit_config(eos_token_id=[0, 5000]), "InvalidConfigError",
                 r"eos_token_id=5000 is outside the vocabulary \(0\.\.368\)"),
    "segment-99999": (edit_config(segment_tokens={"prefix": 99999}), "InvalidConfigError",
                      r"segment token for 'prefix'=99999 is outside the vocabulary"),
    "eps-nan": (config_text('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'), "InvalidConfigError",
                r"rms_norm_eps=nan must be a finite number in \(0, 1\]"),
    "eps-negative": (edit_config(rms_norm_eps=-1e-6), "InvalidConfigError",
                     r"rms_norm_eps=-1e-06 must be a finite number in \(0, 1\]"),
    "theta-inf": (config_text('"rms_norm_eps"', '"rope_theta": Infinity, "rms_norm_eps"'), "InvalidConfigError",
                  r"rope_theta=inf must be a finite number in \[1, 1e\+12\]"),
    "theta-zero": (edit_config(rope_theta=0), "InvalidConfigError",
                   r"rope_theta=0\.0 must be a finite number in \[1, 1e\+12\]"),
    "rope-yarn": (edit_config(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "InvalidConfigError",
                  r"rope_scaling type 'yarn' is not supported \(known: default, linear, llama3\)"),
    "rope-factor-nan": (config_text('"rms_norm_eps"', '"rope_scaling": {"rope_type": "linear", "factor": NaN}, '
                                                      '"rms_norm_eps"'), "InvalidConfigError",
                        r"rope_scaling factor=nan must be a finite number"),
    "sampler-span-10^9": (edit_config(redraft_sampler={"span": 10 ** 9}), "InvalidConfigError",
                          r"redraft_sampler: span=1000000000 must be a whole number in 0\.\.1024"),
    "vocab-below-tokenizer": (edit_config(vocab_size=100), "InvalidConfigError",
                              r"tokenizer\.json has token ids up to 368 but vocab_size is 100"),
    "config-deep": (write("config.json", "[" * 200_000), "InvalidConfigError",
                    r"config\.json: not valid JSON \(nested too deeply\)"),
    "config-2MiB": (write("config.json", "{}" + " " * (2 << 20)), "UnsafeFileError",
                    r"config\.json: 2 MiB, more than the 1 MiB the loader reads for this file"),
    "config-latin1": (write("config.json", b'{"model_type": "r\xe9draft"}'), "InvalidConfigError",
                      r"config\.json: not UTF-8 text"),
    # files that are not regular files inside the folder: refused from their stat, unopened
    "weights-fifo": (fifo("model.safetensors"), "UnsafeFileError",
                     r"model\.safetensors: is a FIFO \(named pipe\), not a regular file; refused without opening it"),
    "config-fifo": (fifo("config.json"), "UnsafeFileError",
                    r"config\.json: is a FIFO \(named pipe\), not a regular file; refused without opening it"),
    "tokenizer-fifo": (fifo("tokenizer.json"), "UnsafeFileError",
                       r"tokenizer\.json: is a FIFO \(named pipe\), not a regular file"),
    "tokenizer-config-fifo": (fifo("tokenizer_config.json"), "UnsafeFileError",
                              r"tokenizer_config\.json: is a FIFO \(named pipe\), not a regular file"),
    "weights-socket": (unix_socket("model.safetensors"), "UnsafeFileError",
                       r"model\.safetensors: is a socket, not a regular file"),
    "config-to-dev-zero": (link("config.json", "/dev/zero"), "UnsafeFileError",
                           r"config\.json: leads outside the model folder \(to /dev/zero\)"),
    "tokenizer-to-dev-zero": (link("tokenizer.json", "/dev/zero"), "UnsafeFileError",
                              r"tokenizer\.json: leads outside the model folder \(to /dev/zero\)"),
    "weights-link-out": (link("model.safetensors"), "UnsafeFileError",
                         r"model\.safetensors: leads outside the model folder"),
    "tokenizer-40MiB": (sparse("tokenizer.json", 40 << 20), "UnsafeFileError",
                        r"tokenizer\.json: 40 MiB, more than the 32 MiB the loader reads for this file"),
    "tokenizer-deep": (write("tokenizer.json", '{"a":' * 100_000), "CorruptFileError",
                       r"tokenizer\.json: not a tokenizer the tokenizers library can read"),
    # the index names files in the folder only
    "index-absolute": (index(moved_out), "UnsafeFileError",
                       r"model\.safetensors\.index\.json: '/.*\.safetensors' is not a file name in the model folder"),
    "index-dotdot": (index(dotdot), "UnsafeFileError",
                     r"model\.safetensors\.index\.json: '\.\./.*' is not a file name in the model folder"),
    "index-link-out": (index(linked_shard), "UnsafeFileError",
                       r"shard\.safetensors: leads outside the model folder"),
    "index-9MiB": (write("model.safetensors.index.json", '{"weight_map": {}}' + " " * (9 << 20)), "UnsafeFileError",
                   r"model\.safetensors\.index\.json: 9 MiB, more than the 8 MiB"),
    "index-pickle": (index(lambda folder, outside: "pytorch_model.bin"), "CorruptFileError",
                     r"lists 'pytorch_model\.bin': only \*\.safetensors weights are read"),
    # the weights' own tables against the config
    "header-1GiB": (huge_header, "UnsafeFileError",
                    r"model\.safetensors: a header of 1073741824 bytes, more than the 8 MiB the loader reads"),
    "config-claims-more": (edit_config(hidden_size=256, intermediate_size=1024), "ShapeMismatchError",
                           r"config\.json implies [\d,]+ parameters \(at least [\d,]+ bytes\) but the weight files "
                           r"hold [\d,]+ bytes"),
    "files-hold-more": (extra_tensor(1 << 30), "ShapeMismatchError",
                        r"the weight files hold [\d,]+ bytes, more than the [\d,]+ parameters config\.json implies"),
    "weights-int8": (retyped("model.norm.weight"), "ShapeMismatchError",
                     r"model\.norm\.weight is I8; weights are read as F64, F32, F16, BF16"),
    "tensor-twice": (split_twice, "CorruptFileError", r"b\.safetensors: model\.norm\.weight is also in a\.safetensors"),
}


def build(root: Path, base: Path, names=None) -> dict[str, Path]:
    """A crafted copy of `base` per case (all of CASES, or `names`), under `root`."""
    outside = root / "outside"
    outside.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names or CASES:
        folder = root / name
        shutil.copytree(base, folder, symlinks=True)
        CASES[name][0](folder, outside)
        out[name] = folder
    return out


_WORKER = r"""
import json, resource, sys, time
from redraft.engine import Engine
good, folders = json.loads(sys.argv[1])
Engine.load(good, dtype="float32")  # torch, the model code and a tokenizer, warmed
def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"name": None, "peak_mb": rss_mb()}), flush=True)
for name, folder in folders.items():
    t0 = time.perf_counter()
    try:
        Engine.load(folder, dtype="float32")
        kind, message = None, ""
    except Exception as e:
        kind, message = type(e).__name__, str(e)
    print(json.dumps({"name": name, "error": kind, "message": message, "seconds": time.perf_counter() - t0,
                      "peak_mb": rss_mb()}), flush=True)
"""


def load_each(good: Path, folders: dict[str, Path], timeout: float = 240) -> tuple[float, dict[str, dict]]:
    """Load `good`, then each folder, in one fresh process: (peak MB after `good`, name -> {error,
    message, seconds, peak_mb}). The peak only grows, so a load that took memory shows from its
    own row on. A load that never returns leaves its row (and those after it) out."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    arg = json.dumps([str(good), {k: str(v) for k, v in folders.items()}])
    try:
        out = subprocess.run([sys.executable, "-c", _WORKER, arg], capture_output=True, text=True, timeout=timeout,
                             env=env).stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert rows and rows[0]["name"] is None, out[-2000:]
    return rows[0]["peak_mb"], {r["name"]: r for r in rows[1:]}
