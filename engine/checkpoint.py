"""Reading Hugging Face checkpoint folders of every known family into the one model.

Families (config.json `model_type`):
  Dream / DiffuCoder / Dream-Coder / DreamOn  "Dream"   Qwen2 names, shifted, mask 151666
  Open-dCoder                                 "qwen2"   Qwen2 names, shifted, mask from tokenizer
  LLaDA                                       "llada"   OLMo names on a LLaMA block, not shifted, mask 126336
  LLaMA-layout diffusion checkpoints          "llama"   LLaMA names, mask from config/tokenizer
  redraft's own models                        "redraft" Qwen2 names + the keys in `_redraft_fields`

Weights come from *.safetensors only (never pickle, never remote code). Renaming onto the
one model happens in the loader only (weights.hf_name).

A model folder is untrusted data: every file is read through folder.py (regular files inside
the folder, sizes capped before reading), config.json's shapes and ids are bounded by
ModelConfig before anything is built, and every safetensors header is checked against the
shapes the config implies before a tensor is read (weights.py).

A folder that cannot be used raises a CheckpointError naming the file and the problem, in one
line: no config.json or weights (MissingFileError), a FIFO, device, link out of the folder or
oversized file (UnsafeFileError), a truncated or garbled file (CorruptFileError, found from
the safetensors header before any tensor is read), a config.json value of the wrong type or
past a bound (InvalidConfigError), a tensor of the wrong shape (ShapeMismatchError), a NaN or
Inf weight (NonFiniteWeightError: every tensor is checked once, as it loads).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch.overrides import TorchFunctionMode

from .config import NATURAL_LAYOUT, ModelConfig, SamplerConfig
from .dtypes import check_device
from .errors import (CheckpointError, CorruptFileError, InsufficientMemoryError, InvalidConfigError,
                     MissingFileError, ModelNotFoundError, NoMaskTokenError, NonFiniteWeightError,
                     UnknownModelTypeError)
from .folder import CONFIG_BYTES, Folder, descriptor_path
from .model import DiffusionLM, Rotary
from .tokenizer import Tokenizer
from .weights import (check_layout, check_sizes, check_tables, hf_name,  # noqa: F401 (hf_name: re-exported)
                      read_table, weight_files)

SHIPPED_DIR = Path(__file__).resolve().parent / "models"
SHIPPED = ("redraft-diffusion", "redraft-ar")
DEFAULT_MODEL = "redraft-diffusion"
KNOWN_MASK_IDS = {"dream": 151666, "llada": 126336}
END_TOKEN_NAMES = ("<|endoftext|>", "<|im_end|>", "<|dlm_pad|>", "<|eot_id|>", "<|end_of_text|>",
                   "<|eos|>", "<|pad|>", "<eos>", "</s>", "<pad>")
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


# -- finding a checkpoint ----------------------------------------------------------------

def resolve(path_or_name: str | os.PathLike) -> Path:
    """A checkpoint folder from a path, a shipped model's name, or a pulled Hugging Face id."""
    name = str(path_or_name)
    # A shipped name means the shipped model, even where the working folder (a cloned repository,
    # say) holds a folder of that name; `./redraft-diffusion` still names the local one.
    if name in SHIPPED:
        folder = SHIPPED_DIR / name
        if (folder / "config.json").is_file():
            return folder
        raise ModelNotFoundError(f"the model {name!r} is not shipped in this build of redraft yet; "
                                 f"pass --model PATH to a checkpoint folder")
    p = Path(path_or_name).expanduser()
    if p.is_dir():
        if not os.path.lexists(p / "config.json"):
            raise MissingFileError(f"{p}: no config.json (not a checkpoint folder)")
        Folder(p).check(p / "config.json")  # a FIFO, a device, a link out: refused here
        return p
    if p.is_file() and p.name == "config.json":
        return p.parent
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        try:
            from huggingface_hub import snapshot_download
            return Path(snapshot_download(name, local_files_only=True))
        except Exception:
            raise ModelNotFoundError(f"{name!r} is not downloaded; run `redraft pull {name}` first") from None
    raise ModelNotFoundError(f"no checkpoint folder or known model named {name!r} "
                             f"(shipped names: {', '.join(SHIPPED)})")


def pull(repo_id: str) -> Path:
    """Download a checkpoint's safetensors, config and tokenizer into the Hugging Face cache."""
    from huggingface_hub import snapshot_download
    return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))


def _config_json(folder: Path) -> dict:
    """config.json's object, read as an untrusted file (folder.py): InvalidConfigError when it is
    not JSON or not an object, MissingFileError / UnsafeFileError as folder.py says."""
    place, path = Folder(folder), folder / "config.json"
    if not os.path.lexists(path):
        raise MissingFileError(f"{folder}: no config.json")
    raw = place.read_json(path, CONFIG_BYTES, InvalidConfigError)
    if not isinstance(raw, dict):
        raise InvalidConfigError(f"{path}: must hold a JSON object, not {type(raw).__name__}")
    return raw


# The sampler settings a checkpoint may ship, and their bounds: a span past the server's largest
# budget (block_tokens) would only make every request slower and larger.
MAX_SAMPLER_TOKENS = 1024
_SAMPLER_COUNTS = ("span", "tokens_per_step", "max_steps", "refresh_every", "block_size", "give_up_after",
                   "window_refresh", "draft_block")


def read_sampler_defaults(folder: Path) -> dict:
    """Sampler settings a redraft checkpoint ships with (config.json `redraft_sampler`), if any;
    InvalidConfigError for settings SamplerConfig refuses or past the bounds above. (A
    config.json that cannot be read is left for read_config to name.)"""
    try:
        raw = _config_json(folder)
    except CheckpointError:
        return {}
    value = raw.get("redraft_sampler") or {}
    path = folder / "config.json"
    if not isinstance(value, dict):
        raise InvalidConfigError(f"{path}: redraft_sampler must be an object")
    out = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    counts = [(k, out[k]) for k in _SAMPLER_COUNTS if k in out]
    counts += [("lengths", n) for n in out.get("lengths", ()) if isinstance(out["lengths"], tuple)]
    for key, n in counts:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SAMPLER_TOKENS:
            raise InvalidConfigError(f"{path}: redraft_sampler: {key}={n!r} must be a whole number in "
                                     f"0..{MAX_SAMPLER_TOKENS}")
    if len(out.get("lengths") or ()) > 16:
        raise InvalidConfigError(f"{path}: redraft_sampler: lengths lists more than 16 span lengths")
    nan = [k for k, v in out.items() if isinstance(v, float) and math.isnan(v)]
    if nan:
        raise InvalidConfigError(f"{path}: redraft_sampler: {nan[0]} is NaN")
    try:
        SamplerConfig().with_(**out)
    except (TypeError, ValueError) as e:
        raise InvalidConfigError(f"{path}: redraft_sampler: {e}") from None
    return out


# -- config.json -> ModelConfig ------------------------------------------------------------

def _languages(value, path: Path) -> tuple[str, ...]:
    """config.json `redraft_languages`: the language ids a model was trained on (none: any)."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidConfigError(f"{path}: redraft_languages must be a list of language ids")
    return tuple(value)


def read_config(folder: Path, tokenizer: Tokenizer | None) -> ModelConfig:
    """The ModelConfig of config.json, checked against the bounds ModelConfig holds (config.py)
    before anything is built from it; InvalidConfigError (one line, naming the key) otherwise."""
    path = folder / "config.json"
    raw = _config_json(folder)
    try:
        fields = _fields(raw, path, tokenizer)
        fields |= _special_ids(raw, tokenizer, fields)
        fields["languages"] = _languages(raw.get("redraft_languages"), path)
    except (TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as e:  # wrong type
        raise InvalidConfigError(f"{path}: a value has the wrong type or range ({e})") from None
    bad = [k for k in _SIZES if fields.get(k, 1) <= 0]
    if bad:
        raise InvalidConfigError(f"{path}: {', '.join(f'{k}={fields[k]}' for k in bad)} must be positive")
    try:
        cfg = ModelConfig(**fields)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidConfigError(f"{path}: {e}") from None
    if tokenizer is not None and tokenizer.max_id >= cfg.vocab_size:
        raise InvalidConfigError(f"{path}: tokenizer.json has token ids up to {tokenizer.max_id} but vocab_size is "
                                 f"{cfg.vocab_size} (the model has no embedding for the rest)")
    return cfg


_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "head_dim", "max_position_embeddings")


def _fields(raw: dict, path: Path, tokenizer: Tokenizer | None) -> dict:
    kind = str(raw.get("model_type", "")).lower()
    if kind == "dream":
        fields = _qwen2_fields(raw, bias_default=True) | {"family": "dream", "shifted": True}
    elif kind == "qwen2":
        fields = _qwen2_fields(raw, bias_default=True) | {"family": "open-dcoder", "shifted": True}
    elif kind == "llama":
        fields = _qwen2_fields(raw, bias_default=False) | {
            "family": "llama", "shifted": bool(raw.get("shifted", False))}
    elif kind == "llada":
        fields = _llada_fields(raw) | {"family": "llada", "shifted": False}
    elif kind == "redraft":
        fields = _qwen2_fields(raw, bias_default=False) | _redraft_fields(raw, tokenizer)
    else:
        raise UnknownModelTypeError(
            f"{path}: unknown model_type {str(raw.get('model_type'))[:80]!r} "
            f"(known: Dream, qwen2, llama, llada, redraft)")
    return fields


def _need(raw: dict, *keys: str):
    for k in keys:
        if k in raw and raw[k] is not None:
            return raw[k]
    raise InvalidConfigError(f"config.json lacks {keys[0]!r}")


def _rope(raw: dict) -> tuple[float, tuple]:
    params = raw.get("rope_parameters") or {}
    theta = next((v for v in (raw.get("rope_theta"), params.get("rope_theta")) if v is not None), 10000.0)
    theta = float(theta)  # (a 0 is refused by ModelConfig, not taken for the default)
    scaling = raw.get("rope_scaling") or params
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    items = () if kind == "default" else tuple(
        sorted((k, v) for k, v in scaling.items() if isinstance(v, (int, float, str))))
    return theta, items


def _head_dim(hidden: int, heads: int) -> int:
    """The head size a config without `head_dim` implies."""
    if hidden % heads:
        raise ValueError(f"hidden_size={hidden} is not a multiple of the {heads} attention heads")
    return hidden // heads


def _qwen2_fields(raw: dict, bias_default: bool) -> dict:
    heads = int(_need(raw, "num_attention_heads"))
    hidden = int(_need(raw, "hidden_size"))
    theta, scaling = _rope(raw)
    return dict(
        vocab_size=int(_need(raw, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(_need(raw, "intermediate_size")),
        num_hidden_layers=int(_need(raw, "num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or _head_dim(hidden, heads)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=int(raw.get("max_position_embeddings", 32768)),
        attention_bias=bool(raw.get("attention_bias", bias_default)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
    )


def _llada_fields(raw: dict) -> dict:
    for key, want in (("block_type", "llama"), ("activation_type", "silu"), ("layer_norm_type", "rms")):
        if str(raw.get(key, want)).lower() != want:
            raise InvalidConfigError(f"LLaDA config with {key}={raw.get(key)!r} is not supported (need {want!r})")
    d = int(_need(raw, "d_model"))
    heads = int(_need(raw, "n_heads"))
    return dict(
        vocab_size=int(raw.get("embedding_size") or _need(raw, "vocab_size")),
        hidden_size=d,
        intermediate_size=int(raw.get("mlp_hidden_size") or int(raw.get("mlp_ratio", 4)) * d),
        num_hidden_layers=int(_need(raw, "n_layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(raw.get("n_kv_heads") or heads),
        head_dim=_head_dim(d, heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        max_position_embeddings=int(raw.get("max_sequence_length", 4096)),
        attention_bias=bool(raw.get("include_bias") or raw.get("include_qkv_bias")),
        tie_word_embeddings=bool(raw.get("weight_tying", False)),
    )


def _redraft_fields(raw: dict, tokenizer: Tokenizer | None) -> dict:
    """redraft's own keys: shifted, attention_pattern, layout, segment_tokens (+ the special ids)."""
    sentinels = {}
    for segment, token in (raw.get("segment_tokens") or {}).items():
        tid = token if isinstance(token, int) else (tokenizer.token_id(token) if tokenizer else None)
        if tid is None:
            raise InvalidConfigError(f"config.json: segment token {token!r} for {segment!r} is not in the tokenizer")
        sentinels[segment] = tid
    return dict(
        family="redraft",
        shifted=bool(raw.get("shifted", False)),
        attention=str(raw.get("attention_pattern", "full")),
        layout=tuple(raw.get("layout", NATURAL_LAYOUT)),
        segment_tokens=tuple(sorted(sentinels.items())),
        # redraft's diffusion models are trained to judge visible draft tokens (training/train.py)
        draft_scoring=str(raw.get("draft_scoring", "visible")),
        block_size=raw.get("redraft_block_size", 0),
    )


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def _special_ids(raw: dict, tok: Tokenizer | None, fields: dict) -> dict:
    family = fields["family"]
    mask = raw.get("mask_token_id")
    if mask is None and tok is not None:
        mask = tok.declared("mask_token")
    if mask is None:
        mask = KNOWN_MASK_IDS.get(family)
    causal = fields.get("attention") == "causal"
    if mask is None and not causal:
        raise NoMaskTokenError(f"{family} checkpoint declares no mask token (config.json mask_token_id, "
                               f"tokenizer mask_token) and its family has no known default")
    pad = raw.get("pad_token_id")
    if pad is None and tok is not None:
        pad = tok.declared("pad_token")
    bos = raw.get("bos_token_id")
    if bos is None and tok is not None:
        bos = tok.declared("bos_token")
    ends = set(_ids(raw.get("eos_token_id"))) | set(_ids(pad))
    if tok is not None:
        ends |= {i for i in (tok.declared("eos_token"), tok.declared("pad_token")) if i is not None}
        ends |= {i for i in map(tok.token_id, END_TOKEN_NAMES) if i is not None}
    ends.discard(mask)
    if isinstance(bos, list):
        bos = bos[0] if bos else None
    return dict(mask_token_id=None if mask is None else int(mask),
                pad_token_id=None if pad is None else int(_ids(pad)[0]),
                bos_token_id=None if bos is None else int(bos),
                end_token_ids=tuple(sorted(ends)))


# -- weights -------------------------------------------------------------------------------

def available_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def load_model(folder: Path, cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> DiffusionLM:
    """The model of `cfg` with the folder's weights. Every file's table of tensors is checked
    against `cfg` (weights.py) and the total against the device's free memory before the model
    is built or a tensor is read."""
    check_device(device)
    place = Folder(folder)
    files = weight_files(place)
    for f in files:
        check_layout(place, f)
    count = check_sizes(folder, files, cfg)
    need, have = count * torch.empty((), dtype=dtype).element_size(), available_bytes(device)
    if have is not None and need > 0.9 * have:
        raise InsufficientMemoryError(
            f"{folder.name}: weights need {need / 2**30:.1f} GiB in {str(dtype).split('.')[-1]} "
            f"but {device} has {have / 2**30:.1f} GiB free; choose a smaller dtype or another device")
    tables = {f: read_table(place, f) for f in files}
    plan = check_tables(folder, tables, cfg)
    with torch.device("meta"), _Skeleton():
        model = DiffusionLM(cfg)
    state: dict[str, torch.Tensor] = {}
    for f, pairs in plan.items():
        with place.open(f) as (fd, _):
            try:
                with safe_open(descriptor_path(fd, f), framework="pt", device="cpu") as st:
                    for name, target in pairs:
                        if cfg.tie_word_embeddings and target == "lm_head.weight":
                            continue  # the embedding serves as the head
                        t = st.get_tensor(name)
                        if tuple(t.shape) != tables[f][name][1]:
                            raise CorruptFileError(f"{f}: changed while it was being read")
                        state[target] = _finite(t.to(device=device, dtype=dtype), t, f, name)
            except SafetensorError as e:  # what the header check could not see
                raise CorruptFileError(f"{f}: not a readable safetensors file ({e})") from None
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.model.rotary_emb = Rotary(cfg).to(device)  # buffers were on the meta device
    return model.eval()


class _Skeleton(TorchFunctionMode):
    """Modules built without initial values, for weights that are read next. On the meta
    device nn.Embedding's normal_ runs through torch._refs, whose first call imports
    torch._dynamo: 3-7 s on the 2-core development machine (load_model of the shipped model
    takes ~0.2 s without it), for values nobody reads. A mode is per thread: modules built
    elsewhere meanwhile are initialised as usual."""

    INITS = frozenset({torch.nn.init.normal_, torch.nn.init.uniform_, torch.nn.init.kaiming_uniform_,
                       torch.nn.init.trunc_normal_, torch.nn.init.xavier_uniform_, torch.nn.init.xavier_normal_,
                       torch.Tensor.normal_, torch.Tensor.uniform_})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.INITS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)


def _finite(t: torch.Tensor, original: torch.Tensor, f: Path, name: str) -> torch.Tensor:
    """`t` (a weight as it will be used), or NonFiniteWeightError naming it. One pass per
    tensor as it loads: NaN and Inf carry through a sum, so a finite sum clears the tensor
    (2-3 ms for the shipped model's 9.4M weights on one CPU thread, where `isfinite(t).all()`
    takes ~40 ms); only a sum that is not finite (a bad value, or a sum past the dtype's range)
    is looked at element by element."""
    if not t.is_floating_point() or bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all()):
        return t
    if original.is_floating_point() and bool(torch.isfinite(original).all()):
        big = original.abs().max().item()
        raise NonFiniteWeightError(f"{f.name}: {name} overflows to Inf in {str(t.dtype).split('.')[-1]} "
                                   f"(values up to {big:.3g}); choose another dtype (bfloat16, float32)")
    bad = original.float()
    nan, inf = int(bad.isnan().sum()), int(bad.isinf().sum())
    raise NonFiniteWeightError(f"{f.name}: {name} holds {nan} NaN and {inf} Inf of {bad.numel()} values "
                               f"(a diverged or damaged checkpoint)")


def save_checkpoint(model: DiffusionLM, folder: Path, config: dict, dtype: torch.dtype = torch.bfloat16) -> None:
    """Write a redraft-format folder: config.json + model.safetensors (tokenizer copied by the caller)."""
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
