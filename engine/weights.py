"""A checkpoint's safetensors files, checked against its config before any tensor is read.

Which files hold the weights (the index's `weight_map`, else `model.safetensors`, else every
`*.safetensors`), each a regular file inside the folder (folder.py); each file's table of
tensors, parsed by the safetensors library itself, which also proves that the table's
offsets, shapes and dtypes cover the file exactly; then that table against the shapes the
config implies: every tensor the model has, of that shape, in a floating-point dtype, and no
other. A config.json therefore cannot declare more parameters than the files hold, and the
files cannot hold more than the config declares.

Knows the one model's parameter names and shapes (model.py) and the safetensors format; reads
no tensor data.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from pathlib import Path

from safetensors import SafetensorError, safe_open

from .config import ModelConfig
from .errors import CorruptFileError, InsufficientMemoryError, MissingFileError, ShapeMismatchError, UnsafeFileError
from .folder import INDEX_BYTES, Folder, descriptor_path

INDEX = "model.safetensors.index.json"
MAX_HEADER = 8 << 20  # bytes of a file's table of tensors; a 512-layer model's is ~1 MB
MAX_FILES = 1024  # shards (LLaDA 8B ships 6)
SKIPPED_BYTES = 64 << 20  # tensors a checkpoint may hold that the model has not (IGNORED)
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
LLADA_NAMES = [
    (r"model\.transformer\.wte\.weight", "model.embed_tokens.weight"),
    (r"model\.transformer\.ln_f\.weight", "model.norm.weight"),
    (r"model\.transformer\.ff_out\.weight", "lm_head.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.(q|k|v)_proj\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
    (r"model\.transformer\.blocks\.(\d+)\.attn_out\.weight", r"model.layers.\1.self_attn.o_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.ff_proj\.weight", r"model.layers.\1.mlp.gate_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.up_proj\.weight", r"model.layers.\1.mlp.up_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.ff_out\.weight", r"model.layers.\1.mlp.down_proj.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"model\.transformer\.blocks\.(\d+)\.ff_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
]
IGNORED = re.compile(r".*(rotary_emb\.inv_freq|\.rope\.|_extra_state)$")


def hf_name(name: str, family: str) -> str:
    """The model's parameter name for a checkpoint tensor name."""
    if family == "llada":
        for pattern, repl in LLADA_NAMES:
            new, n = re.subn(f"^{pattern}$", repl, name)
            if n:
                return new
    return name


# -- which files ---------------------------------------------------------------------------

def weight_files(folder: Folder) -> dict[Path, int]:
    """The safetensors files to read, each a regular file inside the folder, with its size."""
    if folder.exists(INDEX):
        index = folder.path / INDEX
        value = folder.read_json(index, INDEX_BYTES)
        weight_map = value.get("weight_map") if isinstance(value, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CorruptFileError(f"{index}: not a safetensors index (needs a weight_map object of "
                                   f"tensor name -> file name)")
        names = sorted(set(weight_map.values()))
        if len(names) > MAX_FILES:
            raise UnsafeFileError(f"{index}: lists {len(names)} weight files, more than the {MAX_FILES} "
                                  f"the loader reads")
        bad = [n for n in names if not n.endswith(".safetensors")]
        if bad:
            raise CorruptFileError(f"{index}: lists {bad[0]!r}: only *.safetensors weights are read")
        files = [folder.entry(n, listed_in=index) for n in names]
        missing = [f.name for f in files if not os.path.lexists(f)]
        if missing:
            raise MissingFileError(f"{folder.path}: weight shards listed in the index are missing: {missing}")
    elif folder.exists("model.safetensors"):
        files = [folder.path / "model.safetensors"]
    else:
        files = sorted(folder.path.glob("*.safetensors"))
        if not files:
            pickled = [f.name for f in folder.path.glob("*.bin")] + [f.name for f in folder.path.glob("*.pt")]
            hint = f" (found {pickled}: pickled weights are never loaded)" if pickled else ""
            raise MissingFileError(f"{folder.path}: no *.safetensors weights{hint}")
        if len(files) > MAX_FILES:
            raise UnsafeFileError(f"{folder.path}: {len(files)} *.safetensors files, more than the "
                                  f"{MAX_FILES} the loader reads")
    return {f: folder.check(f).st_size for f in files}


# -- each file's table ---------------------------------------------------------------------

def check_layout(folder: Folder, f: Path) -> None:
    """A safetensors file's size against the header it declares, before the file is mapped:
    CorruptFileError for a truncated download, trailing bytes or a header that is not a table
    of tensors; UnsafeFileError for a header past MAX_HEADER. (read_table then has the
    safetensors library parse and check the table itself.)"""
    with folder.open(f) as (fd, size):
        head = os.pread(fd, 8, 0)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 2 <= n <= size - 8:
            raise CorruptFileError(f"{f}: truncated or not a safetensors file ({size} bytes, too short "
                                   f"for the header it declares)")
        if n > MAX_HEADER:
            raise UnsafeFileError(f"{f}: a header of {n} bytes, more than the {MAX_HEADER >> 20} MiB the loader reads")
        raw = os.pread(fd, n, 8)
    try:
        header = json.loads(raw)
        ends = []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = (int(x) for x in info["data_offsets"])
            if not (0 <= begin <= end and all(int(d) >= 0 for d in info["shape"]) and isinstance(info["dtype"], str)):
                raise ValueError(name)
            ends.append(end)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise CorruptFileError(f"{f}: not a safetensors file (its header is not a table of tensors)") from None
    have, need = size - 8 - n, max(ends, default=0)
    if have < need:
        raise CorruptFileError(f"{f}: truncated ({size} bytes; its header describes {8 + n + need})")
    if have > need:
        raise CorruptFileError(f"{f}: {have - need} bytes after its last tensor (not a file safetensors wrote)")


def read_table(folder: Folder, f: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) of every tensor `f` holds, as the safetensors library parses its
    header (checking that offsets, dtypes and shapes cover the file exactly); no tensor is read."""
    with folder.open(f) as (fd, _):
        try:
            with safe_open(descriptor_path(fd, f), framework="pt", device="cpu") as st:
                table = {}
                for name in st.keys():
                    s = st.get_slice(name)
                    table[name] = (str(s.get_dtype()), tuple(int(d) for d in s.get_shape()))
                return table
        except SafetensorError as e:
            raise CorruptFileError(f"{f}: not a readable safetensors file ({e})") from None
        except RuntimeError as e:  # the file could not be mapped (larger than memory allows)
            raise InsufficientMemoryError(f"{f}: cannot be mapped into memory ({e})") from None


# -- against the config --------------------------------------------------------------------

def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter of the one model (model.py) for `cfg`, with its shape; lm_head.weight
    too when tied (a file may hold it; it is not needed)."""
    E, I, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    Q, KV = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    out = {"model.embed_tokens.weight": (V, E), "model.norm.weight": (E,), "lm_head.weight": (V, E)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        out |= {p + "self_attn.q_proj.weight": (Q, E), p + "self_attn.k_proj.weight": (KV, E),
                p + "self_attn.v_proj.weight": (KV, E), p + "self_attn.o_proj.weight": (E, Q),
                p + "mlp.gate_proj.weight": (I, E), p + "mlp.up_proj.weight": (I, E),
                p + "mlp.down_proj.weight": (E, I),
                p + "input_layernorm.weight": (E,), p + "post_attention_layernorm.weight": (E,)}
        if cfg.attention_bias:
            out |= {p + "self_attn.q_proj.bias": (Q,), p + "self_attn.k_proj.bias": (KV,),
                    p + "self_attn.v_proj.bias": (KV,)}
    return out


def check_tables(folder: Path, tables: dict[Path, dict], cfg: ModelConfig) -> dict[Path, list[tuple[str, str]]]:
    """The files' tensors against what `cfg` implies: ShapeMismatchError for a tensor of another
    shape or a dtype that is not floating point, one the model lacks, or one it needs that no
    file holds; CorruptFileError for a tensor held twice. Returns, per file, the (checkpoint
    name, model name) pairs to load."""
    expected = expected_shapes(cfg)
    plan: dict[Path, list[tuple[str, str]]] = {}
    seen: dict[str, Path] = {}
    unexpected = []
    for f, table in tables.items():
        plan[f] = []
        for name, (dtype, shape) in table.items():
            target = hf_name(name, cfg.family)
            if target not in expected:
                if not IGNORED.match(name):
                    unexpected.append(name)
                continue
            if target in seen:
                raise CorruptFileError(f"{f}: {name} is also in {seen[target].name}")
            seen[target] = f
            if shape != expected[target]:
                raise ShapeMismatchError(f"{f}: {name} has shape {shape}, config.json implies {expected[target]}")
            if dtype not in FLOAT_DTYPES:
                raise ShapeMismatchError(f"{f}: {name} is {dtype}; weights are read as "
                                         f"{', '.join(FLOAT_DTYPES)}")
            plan[f].append((name, target))
    if unexpected:
        raise ShapeMismatchError(f"{folder}: tensors the model does not have: {unexpected[:5]}"
                                 f"{' ...' if len(unexpected) > 5 else ''}")
    if cfg.tie_word_embeddings:
        expected.pop("lm_head.weight")
    missing = sorted(set(expected) - set(seen))
    if missing:
        raise ShapeMismatchError(f"{folder}: weights missing from the checkpoint: {missing[:5]}"
                                 f"{' ...' if len(missing) > 5 else ''}")
    return plan


def parameter_count(cfg: ModelConfig) -> int:
    """The parameters `cfg` implies (the tied output head counted once)."""
    shapes = expected_shapes(cfg)
    if cfg.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    return sum(math.prod(shape) for shape in shapes.values())


def check_sizes(folder: Path, sizes: dict[Path, int], cfg: ModelConfig) -> int:
    """The parameters `cfg` implies, once the files' sizes could hold them and no more: each
    takes 2 to 8 bytes (BF16 .. F64), plus headers and a little for tensors the loader skips
    (rotary tables). So a config.json cannot claim a model its files do not hold, and no file is
    mapped that is larger than the model the config describes. ShapeMismatchError otherwise."""
    n, have = parameter_count(cfg), sum(sizes.values())
    least, most = 2 * n, 8 * n + len(sizes) * MAX_HEADER + SKIPPED_BYTES
    if have < least:
        raise ShapeMismatchError(f"{folder}: config.json implies {n:,} parameters (at least {least:,} bytes) "
                                 f"but the weight files hold {have:,} bytes")
    if have > most:
        raise ShapeMismatchError(f"{folder}: the weight files hold {have:,} bytes, more than the {n:,} parameters "
                                 f"config.json implies can take")
    return n
