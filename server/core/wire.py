"""The engine protocol v1: every body and event a remote engine and its clients exchange, as JSON.

The single source of the protocol: the client (remote.py), the routes that serve it
(http/engine_routes.py) and the cluster's ingress encode and decode with these functions only.

  GET  /v1/redraft/engine/info    -> encode_info(engine) / decode_info
  POST /v1/redraft/engine/infill  encode_infill / decode_infill -> server-sent events:
                                  "preview" (encode_preview) ..., then one "result"
                                  (encode_result) or "error" (encode_error)
  POST /v1/redraft/engine/score   encode_score / decode_score -> encode_scores / decode_scores
  POST /v1/redraft/engine/forget  encode_forget / decode_forget -> {}

What an engine sends is bounded before it is kept: a line of a stream at MAX_LINE_BYTES, an
event's data at MAX_EVENT_BYTES, a whole stream or JSON answer at MAX_STREAM_BYTES /
MAX_BODY_BYTES (`lines`, `read_events`, `body`); past one, TooLarge (a WireError) says which.

Floats that are not finite travel as null: a completion's or a score's null comes back as
-inf; in a sampler, null means the one non-finite value each such field takes (min_score
-inf: always answer; abstain_margin, recheck_margin inf: never give up early). Decoders check every field's
type and raise WireError (a ValueError) naming the field; responses may carry fields this
version does not know (ignored), requests may not (a sampler field unknown here is refused).

It knows the engine's result and config types (torch-free) and the post-processing's `Unit`
(the stop rule that travels); it knows nothing of HTTP clients or servers beyond SSE framing.
`InfillRequest` is imported only when a server decodes a request (it lives beside torch).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable, Iterator

from redraft.engine import Completion, Preview, SamplerConfig, Stats

from .context import Mode
from .postprocess import Unit

PROTOCOL = 1
PREFIX = "/v1/redraft/engine"
INFO, INFILL, SCORE, FORGET = (f"{PREFIX}/{name}" for name in ("info", "infill", "score", "forget"))
SESSION_HEADER, REQUEST_HEADER = "x-session-id", "x-request-id"
# Sampler fields whose non-finite value travels as null, and the value null stands for.
_SAMPLER_NONFINITE = {"min_score": -math.inf, "abstain_margin": math.inf, "recheck_margin": math.inf}
_SAMPLER_TYPES = {f.name: type(f.default) for f in fields(SamplerConfig)}


# Far above any real answer (a result for a batch of 16 requests of 1k tokens is ~0.5 MB), far
# below what would hurt the editor's machine.
MAX_LINE_BYTES = 1 << 20
MAX_EVENT_BYTES = 1 << 20
MAX_STREAM_BYTES = 16 << 20
MAX_BODY_BYTES = 4 << 20


class WireError(ValueError):
    """A body or event that does not follow the protocol; the message names the field."""


class TooLarge(WireError):
    """A line, event, stream or body over its bound (the reader stops there)."""


@dataclass(frozen=True)
class RemoteInfo:
    """What a remote engine is and can do: EngineInfo's fields, plus what a client needs to
    cut windows (context_budget) and to start from the engine's own sampler settings."""

    name: str
    parameters: int
    dtype: str
    device: str
    scores_edits: bool
    context_limit: int
    context_overhead: int
    sampler: SamplerConfig
    languages: tuple[str, ...] = ()  # what the model was trained on (empty: not said)

    def context_budget(self, span: int) -> int:
        return max(1, self.context_limit - span - self.context_overhead)


@dataclass(frozen=True)
class InfillCall:
    """A decoded infill body: the arguments of one `infill_batch` call."""

    requests: list  # of engine InfillRequest
    sampler: SamplerConfig
    cache_key: str
    stop: Unit | None
    previews: bool


# -- values ----------------------------------------------------------------------------------


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _field(d: Any, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
    if not isinstance(d, dict):
        raise WireError(f"{where} must be a JSON object")
    if key not in d:
        if default is ...:
            raise WireError(f"{where}.{key} is missing")
        return default
    v = d[key]
    ok = isinstance(v, kind) and not (isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)))
    if not ok:
        raise WireError(f"{where}.{key} has the wrong type ({type(v).__name__})")
    return v


def _float(d: dict, key: str, where: str, null: float = -math.inf, default: Any = ...) -> float:
    v = _field(d, key, (int, float, type(None)), where, default)
    return null if v is None else float(v)


def _strings(d: dict, key: str, where: str, default: Any = ...) -> list[str]:
    v = _field(d, key, list, where, default)
    if not all(isinstance(s, str) for s in v):
        raise WireError(f"{where}.{key} must be a list of strings")
    return v


def dumps(obj: Any) -> str:
    """JSON text of a body; a NaN or inf the encoders missed is a bug, refused here."""
    return json.dumps(obj, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes, where: str = "body") -> Any:
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise WireError(f"the {where} is not valid JSON: {e}") from None


# -- sampler and stop rule --------------------------------------------------------------------


def encode_sampler(s: SamplerConfig) -> dict:
    out = asdict(s)
    out["lengths"] = list(s.lengths)
    for name in _SAMPLER_NONFINITE:
        out[name] = _num(out[name])
    return out


def decode_sampler(d: Any, base: SamplerConfig | Callable[[], SamplerConfig]) -> SamplerConfig:
    """`base` with the fields `d` gives (all or some); raises WireError for an unknown field,
    a wrong type or a value SamplerConfig refuses. A callable `base` is called only when `d`
    leaves a field out (a server need not ask its engine when the client sent them all)."""
    if not isinstance(d, dict):
        raise WireError("sampler must be a JSON object")
    changes: dict[str, Any] = {}
    for key, v in d.items():
        kind = _SAMPLER_TYPES.get(key)
        if kind is None:
            raise WireError(f"sampler.{key} is not a sampler setting")
        if key in _SAMPLER_NONFINITE:
            changes[key] = _float(d, key, "sampler", null=_SAMPLER_NONFINITE[key])
        elif kind is tuple:
            if not isinstance(v, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in v):
                raise WireError(f"sampler.{key} must be a list of integers")
            changes[key] = tuple(v)
        elif kind is float:
            changes[key] = _float(d, key, "sampler", null=math.nan)
            if not math.isfinite(changes[key]):
                raise WireError(f"sampler.{key} must be a number")
        else:
            changes[key] = _field(d, key, kind, "sampler")
    try:
        if len(changes) == len(_SAMPLER_TYPES):
            return SamplerConfig(**changes)
        return (base() if callable(base) else base).with_(**changes)
    except ValueError as e:
        raise WireError(f"sampler: {e}") from None


def encode_unit(u: Unit | None) -> dict | None:
    if u is None:
        return None
    out = asdict(u)
    out["mode"] = u.mode.value
    return out


def decode_unit(d: Any) -> Unit | None:
    if d is None:
        return None
    where = "stop"
    try:
        mode = Mode(_field(d, "mode", str, where))
    except ValueError:
        raise WireError(f"stop.mode must be one of {', '.join(m.value for m in Mode)}") from None
    max_lines = _field(d, "max_lines", int, where)
    if max_lines < 1:
        raise WireError("stop.max_lines must be at least 1")
    return Unit(mode, _field(d, "header_indent", str, where), max_lines, _field(d, "braces", bool, where, False),
                _field(d, "right", str, where, ""), _field(d, "indented", bool, where, False))


# -- infill -----------------------------------------------------------------------------------


def encode_infill(requests: Iterable[Any], sampler: SamplerConfig, cache_key: str, stop: Unit | None,
                  previews: bool) -> dict:
    """`requests`: objects with prefix, suffix, extra and drafts (InfillRequest's fields)."""
    return {"requests": [{"prefix": r.prefix, "suffix": r.suffix, "extra": r.extra, "drafts": list(r.drafts)}
                         for r in requests],
            "sampler": encode_sampler(sampler), "cache_key": cache_key, "stop": encode_unit(stop),
            "previews": previews}


def decode_infill(d: Any, base: SamplerConfig | Callable[[], SamplerConfig]) -> InfillCall:
    from redraft.engine import InfillRequest  # the server side has the engine (and torch) anyway
    raw = _field(d, "requests", list, "body")
    if not raw:
        raise WireError("body.requests is empty")
    requests = []
    for i, r in enumerate(raw):
        where = f"requests[{i}]"
        requests.append(InfillRequest(_field(r, "prefix", str, where), _field(r, "suffix", str, where, ""),
                                      _field(r, "extra", str, where, ""), tuple(_strings(r, "drafts", where, []))))
    return InfillCall(requests, decode_sampler(_field(d, "sampler", dict, "body", {}), base),
                      _field(d, "cache_key", str, "body", "default"), decode_unit(d.get("stop")),
                      _field(d, "previews", bool, "body", False))


def encode_preview(p: Preview) -> dict:
    return {"request": p.request, "step": p.step, "text": p.text, "masked": p.masked}


def decode_preview(d: Any) -> Preview:
    w = "preview"
    return Preview(_field(d, "request", int, w), _field(d, "step", int, w), _field(d, "text", str, w),
                   _field(d, "masked", int, w))


def encode_stats(s: Stats) -> dict:
    return {k: (_num(v) if isinstance(v, float) else v) for k, v in asdict(s).items()}


def decode_stats(d: Any) -> Stats:
    out = {}
    for f in fields(Stats):
        kind = type(f.default)
        if kind is float:
            out[f.name] = _float(d, f.name, "stats", null=0.0, default=0.0)
        else:
            out[f.name] = _field(d, f.name, kind, "stats", f.default)
    return Stats(**out)


def encode_completion(c: Completion) -> dict:
    return {"text": c.text, "token_ids": list(c.token_ids), "confidences": [_num(x) for x in c.confidences],
            "length": c.length, "stats": encode_stats(c.stats), "healed": c.healed, "score": _num(c.score),
            "abstained": c.abstained}


def decode_completion(d: Any) -> Completion:
    w = "completion"
    ids = _field(d, "token_ids", list, w)
    confs = _field(d, "confidences", list, w)
    if not all(isinstance(t, int) for t in ids) or not all(x is None or isinstance(x, (int, float)) for x in confs):
        raise WireError("completion.token_ids / confidences hold a value of the wrong type")
    return Completion(_field(d, "text", str, w), ids, [-math.inf if x is None else float(x) for x in confs],
                      _field(d, "length", int, w), decode_stats(_field(d, "stats", dict, w, {})),
                      _field(d, "healed", str, w, ""), _float(d, "score", w), _field(d, "abstained", bool, w, False))


def encode_result(completions: list[Completion]) -> dict:
    return {"completions": [encode_completion(c) for c in completions]}


def decode_result(d: Any) -> list[Completion]:
    return [decode_completion(c) for c in _field(d, "completions", list, "result")]


def encode_error(status: int, message: str) -> dict:
    return {"status": status, "message": message}


def decode_error(d: Any) -> tuple[int, str]:
    return _field(d, "status", int, "error"), _field(d, "message", str, "error")


# -- score, forget, info ----------------------------------------------------------------------


def encode_score(prefix: str, suffix: str, texts: list[str], extra: str = "") -> dict:
    return {"prefix": prefix, "suffix": suffix, "texts": list(texts), "extra": extra}


def decode_score(d: Any) -> tuple[str, str, list[str], str]:
    return (_field(d, "prefix", str, "body"), _field(d, "suffix", str, "body", ""), _strings(d, "texts", "body"),
            _field(d, "extra", str, "body", ""))


def encode_scores(scores: list[float]) -> dict:
    return {"scores": [_num(float(s)) for s in scores]}


def decode_scores(d: Any) -> list[float]:
    values = _field(d, "scores", list, "body")
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        raise WireError("body.scores must be a list of numbers")
    return [-math.inf if v is None else float(v) for v in values]


def encode_forget(cache_key: str) -> dict:
    return {"cache_key": cache_key}


def decode_forget(d: Any) -> str:
    return _field(d, "cache_key", str, "body")


def encode_info(engine: Any) -> dict:
    """/info of any object with the Engine interface. The context limit and the overhead come
    from its configs when it has them (an Engine); otherwise its budget at span 0 stands for
    both (the client's budget comes out the same)."""
    info = engine.info()
    bare = engine.context_budget(0)
    cfg, mc = getattr(engine, "config", None), getattr(engine, "model_config", None)
    limit = bare
    if cfg is not None and mc is not None and hasattr(cfg, "max_context_tokens"):
        limit = min(cfg.max_context_tokens, mc.max_position_embeddings)
    return {"protocol": PROTOCOL, "name": info.name, "parameters": info.parameters, "dtype": info.dtype,
            "device": info.device, "scores_edits": info.scores_edits, "context_limit": limit,
            "context_overhead": max(0, limit - bare), "sampler": encode_sampler(engine.sampler),
            "languages": list(getattr(info, "languages", ()))}


def decode_info(d: Any) -> RemoteInfo:
    w = "info"
    protocol = _field(d, "protocol", int, w)
    if protocol != PROTOCOL:
        raise WireError(f"the engine speaks protocol {protocol}, this client {PROTOCOL}")
    return RemoteInfo(_field(d, "name", str, w), _field(d, "parameters", int, w), _field(d, "dtype", str, w),
                      _field(d, "device", str, w), _field(d, "scores_edits", bool, w),
                      _field(d, "context_limit", int, w), _field(d, "context_overhead", int, w, 0),
                      decode_sampler(_field(d, "sampler", dict, w), SamplerConfig()),
                      tuple(str(x) for x in _field(d, "languages", list, w, [])))


# -- server-sent events -----------------------------------------------------------------------


def sse(event: str, data: dict) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {dumps(data)}\n\n"


def lines(chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES, max_total: int = MAX_STREAM_BYTES
          ) -> Iterator[str]:
    """The lines (without their "\n" or "\r\n") of a byte stream arriving in chunks. Each
    chunk is searched once (an endless line costs its bytes, not their square), and a line
    over `max_line` bytes or a stream over `max_total` raises TooLarge as soon as it is seen."""
    pending, total = bytearray(), 0
    for chunk in chunks:
        total += len(chunk)
        if total > max_total:
            raise TooLarge(f"the stream is over {_size(max_total)}")
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if len(pending) + end - start > max_line:
                break
            pending += chunk[start:end]
            yield _text(pending)
            pending.clear()
            start = end + 1
        if len(pending) + len(chunk) - start > max_line:
            raise TooLarge(f"a line of the stream is over {_size(max_line)}")
        pending += chunk[start:]
    if pending:
        yield _text(pending)


def _size(n: int) -> str:
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n} bytes"


def _text(line: bytearray) -> str:
    try:
        return line.rstrip(b"\r").decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"the stream is not UTF-8: {e}") from None


def body(chunks: Iterable[bytes], max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """A whole answer's bytes from its chunks; TooLarge past `max_bytes`."""
    out = bytearray()
    for chunk in chunks:
        if len(out) + len(chunk) > max_bytes:
            raise TooLarge(f"the answer is over {_size(max_bytes)}")
        out += chunk
    return bytes(out)


def read_events(lines: Iterable[str], max_event: int = MAX_EVENT_BYTES) -> Iterator[tuple[str, Any]]:
    """(event, decoded data) for each event in a stream of lines (line ends stripped or not);
    comments and unknown fields are skipped, as SSE says. Raises WireError on bad JSON and
    TooLarge for an event whose data is over `max_event` characters."""
    event, data, size = "message", [], 0
    for line in lines:
        line = line.rstrip("\r\n")
        if not line:
            if data:
                yield event, loads("\n".join(data), f"{event} event")
            event, data, size = "message", [], 0
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            size += len(value) + 1
            if size > max_event:
                raise TooLarge(f"a {event} event is over {_size(max_event)}")
            data.append(value)
    if data:
        yield event, loads("\n".join(data), f"{event} event")
