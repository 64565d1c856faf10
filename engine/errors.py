"""Typed errors raised at the engine's public entry points.

Each names the problem and the file or value at fault, so a caller (CLI, server) can show
it as is. Cancellation is not an error and has its own exception, `Cancelled`.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""


class CheckpointError(EngineError):
    """A checkpoint folder cannot be used."""


class ModelNotFoundError(CheckpointError):
    """No folder, shipped model or downloaded snapshot goes by that name."""


class MissingFileError(CheckpointError):
    """A file the checkpoint needs (config.json, weights, tokenizer) is absent."""


class CorruptFileError(CheckpointError):
    """A checkpoint file is there but cannot be read as what it should be: a truncated or
    garbled safetensors file, a tokenizer.json or index the libraries refuse."""


class UnsafeFileError(CheckpointError):
    """A checkpoint file the loader will not open: not a regular file (a FIFO, device, socket or
    folder), a link or index entry that leads outside the model folder, or a file larger than
    the loader reads for its kind."""


class InvalidConfigError(CheckpointError):
    """config.json is not valid JSON, lacks a key, or holds a value of the wrong type or range
    (shapes past the loader's bounds, a special token id outside the vocabulary, a NaN)."""


class UnknownModelTypeError(CheckpointError):
    """config.json names a model_type no loader knows."""


class ShapeMismatchError(CheckpointError):
    """A tensor's shape disagrees with config.json, or names are missing / unexpected."""


class NonFiniteWeightError(CheckpointError):
    """A weight holds NaN or Inf (in the file, or once cast to the chosen dtype); names the tensor."""


class NoMaskTokenError(CheckpointError):
    """A diffusion checkpoint without a mask token in config, tokenizer or family defaults."""


class DeviceUnavailableError(EngineError):
    """The device asked for is not one this torch can run on (a CPU build asked for CUDA, an
    index past the GPUs there are, a name torch does not know)."""


class InsufficientMemoryError(EngineError):
    """The weights would not fit in the memory of the chosen device."""


class Cancelled(Exception):
    """A request was cancelled between denoising steps. Not an error: callers return nothing."""
