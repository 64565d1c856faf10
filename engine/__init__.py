"""redraft.engine: masked-diffusion infill, in process.

Loads Hugging Face checkpoints of the known diffusion families (Dream / DiffuCoder,
Open-dCoder, LLaDA) and redraft's own models into one Qwen2/LLaMA-style transformer, and
fills masked spans between a prefix and a suffix by confidence-threshold parallel
unmasking, with the context's keys/values cached. Causal checkpoints decode token by token
through the same model.

It owns its prompt format (`prompt`: special tokens, segment order, how edit history and
definitions from other files are rendered), for serving and training alike. It takes strings
or token ids and span lengths; it knows nothing of LSP, URIs, lines and columns, or
tree-sitter.

Names are imported from their modules on first use (PEP 562): importing torch takes a second
or more, and a caller that needs only the torch-free ones (errors, configs, results, the
prompt format, the cache model's lookup types) should not wait for it, such as a server that
answers from drafts while its model loads.
"""

from importlib import import_module

from . import prompt

_HOMES = {
    "checkpoint": ("DEFAULT_MODEL", "SHIPPED", "pull", "resolve"),
    "dtypes": ("check_device",),
    "cachemodel": ("CacheModel",),
    "lookup": ("Continuation", "Lookup"),
    "config": ("CacheConfig", "EngineConfig", "ModelConfig", "SamplerConfig"),
    "engine": ("Engine", "EngineInfo", "InfillRequest"),
    "errors": ("Cancelled", "CheckpointError", "CorruptFileError", "DeviceUnavailableError", "EngineError",
               "InsufficientMemoryError",
               "InvalidConfigError", "MissingFileError", "ModelNotFoundError", "NoMaskTokenError",
               "NonFiniteWeightError", "ShapeMismatchError", "UnknownModelTypeError", "UnsafeFileError"),
    "result": ("CancelFlag", "Completion", "Preview", "Stats"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [*_HOME, "prompt"]


def __getattr__(name: str):
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
