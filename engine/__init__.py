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
"""

from . import prompt
from .checkpoint import DEFAULT_MODEL, SHIPPED, pull, resolve
from .cachemodel import CacheModel, Continuation, Lookup
from .config import CacheConfig, EngineConfig, ModelConfig, SamplerConfig
from .engine import Engine, EngineInfo, InfillRequest
from .errors import (Cancelled, CheckpointError, CorruptFileError, EngineError, InsufficientMemoryError,
                     InvalidConfigError, MissingFileError, ModelNotFoundError, NoMaskTokenError,
                     NonFiniteWeightError, ShapeMismatchError, UnknownModelTypeError)
from .result import CancelFlag, Completion, Preview, Stats

__all__ = [
    "DEFAULT_MODEL", "SHIPPED", "pull", "resolve", "CacheConfig", "CacheModel", "Continuation", "Lookup", "EngineConfig", "ModelConfig", "SamplerConfig", "Engine",
    "EngineInfo", "InfillRequest", "Cancelled", "CheckpointError", "CorruptFileError", "EngineError",
    "InsufficientMemoryError", "InvalidConfigError", "MissingFileError", "ModelNotFoundError", "NoMaskTokenError",
    "NonFiniteWeightError", "ShapeMismatchError",
    "UnknownModelTypeError", "CancelFlag", "Completion", "Preview", "Stats",
    "prompt",
]
