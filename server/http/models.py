"""The models the HTTP API answers with, by name, as Ollama and OpenAI-compatible servers do:
a request names a model and gets that model, or 404 naming the ones there are.

The loaded model (the Inference's, shared with LSP) comes first; the shipped models follow,
each loaded on first request (on the inference executor, a second or so) and kept, at most
`keep` of them beside the loaded one, the least recently asked for dropped first (each is
~40 MB). Behind a remote engine (`--engine-url`) or the cluster's batcher only that engine's
model is served: this process loads none. /api/tags and /v1/models list exactly `names()`.

It knows nothing of routes beyond ApiError (404, 503).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from redraft.engine import DEFAULT_MODEL, SHIPPED, EngineError, resolve

from ..core.inference import Inference
from ..core.remote import RemoteEngine
from ..core.settings import ServerConfig
from . import templates
from .engine import ApiError

KEEP = 1  # shipped models kept loaded beside the Inference's


class Models:
    def __init__(self, inference: Inference, config: ServerConfig, keep: int = KEEP) -> None:
        self.inference, self.config, self.keep = inference, config, keep
        self._others: OrderedDict[str, Any] = OrderedDict()  # name -> Engine; changed on the executor only

    def main(self) -> str:
        """The loaded model's name (or the configured one, while it loads)."""
        engine = self.inference.engine
        return engine.name if engine is not None else _configured(self.config.model)

    def names(self) -> list[str]:
        """Every name a request may ask for, the loaded model first."""
        if not self._local():
            return [self.main()]
        return list(dict.fromkeys([self.main(), *(n for n in SHIPPED if _shipped_folder(n) is not None)]))

    def _local(self) -> bool:
        """The models run in this process: not behind a remote engine, nor the cluster's batcher
        (each replica serves its one model)."""
        engine = self.inference.engine
        if self.config.engine_url or isinstance(engine, RemoteEngine):
            return False
        if engine is None:  # a local model loading
            return True
        from redraft.engine import Engine  # (imported already: a model is loaded)
        return isinstance(engine, Engine)

    def kept(self) -> list[str]:
        """The shipped models loaded beside the Inference's, the most recently asked for last."""
        return list(self._others)

    def pick(self, body: dict) -> str:
        """The model a request asks for (the loaded one when it names none); 404 for one not
        served here, 503 at once (rather than inside a stream) when the loaded one failed."""
        asked = templates.field(body, "model", str, "").removesuffix(":latest")
        names = self.names()
        if asked and asked not in names:
            raise ApiError(404, f"model {asked!r} not found; available: {', '.join(names)}", available=names)
        name = asked or names[0]
        if name == names[0] and self.inference.engine is None and self.inference.load_error:
            raise ApiError(503, self.inference.load_error)
        return name  # (while the model loads, a job waits behind the load on the executor)

    def engine(self, name: str):
        """The engine answering as `name`, loaded now when it is a shipped model not yet
        loaded. On the inference executor only: engines are not shared across threads."""
        if name == self.main():
            if self.inference.engine is None:
                raise ApiError(503, self.inference.load_error or "the model is still loading")
            return self.inference.engine
        engine = self._others.get(name)
        if engine is None:
            engine = self._load(name)
            self._others[name] = engine
            while len(self._others) > self.keep:
                self._others.popitem(last=False)
        self._others.move_to_end(name)
        return engine

    def _load(self, name: str):
        from redraft.engine import Engine  # torch: loaded already, by the Inference's own model
        loaded = self.inference.loaded
        device, dtype = (loaded[1], loaded[2]) if loaded else (self.config.device, self.config.dtype)
        try:
            return Engine.load(name, device=device, dtype=dtype)
        except (EngineError, ValueError, OSError, RuntimeError) as e:
            raise ApiError(503, f"could not load model {name!r}: {e}") from None

    def describe(self, name: str) -> dict:
        """Ollama's description of a model: its files' size and time, its parameters and dtype
        once it is loaded."""
        main = self.inference.engine
        engine = main if main is not None and main.name == name else self._others.get(name)
        folder = engine.path if engine is not None else _shipped_folder(name)
        files = list(folder.glob("*.safetensors")) if folder is not None else []
        stamp = max((f.stat().st_mtime for f in files), default=0.0)
        try:
            info = engine.info() if engine is not None else None
        except EngineError:  # a remote engine that has not answered yet
            info = None
        return {"modified_at": datetime.fromtimestamp(stamp, timezone.utc).isoformat().replace("+00:00", "Z"),
                "size": sum(f.stat().st_size for f in files),
                "digest": uuid.uuid5(uuid.NAMESPACE_URL, f"{name}:{stamp}").hex,
                "details": {"parent_model": "", "format": "safetensors", "family": "redraft", "families": ["redraft"],
                            "parameter_size": f"{info.parameters / 1e6:.1f}M" if info else "",
                            "quantization_level": info.dtype if info else ""}}


def _configured(model: str | None) -> str:
    """The name Engine.load will give a model: a folder's name, or the name itself."""
    if not model:
        return DEFAULT_MODEL
    path = Path(model).expanduser()
    return path.name if path.is_dir() else model


def _shipped_folder(name: str) -> Path | None:
    if name not in SHIPPED:
        return None
    try:
        return resolve(name)
    except EngineError:
        return None
