"""The HTTP API's engine side: a request's prefix and suffix (or Mercury's edit region) as
a server Snapshot, and the engine call on it, run on the inference executor.

A completion goes the LSP server's way (see app.py): a document with the cursor between
prefix and suffix, the mode at the cursor ("nothing" becomes LINE: an HTTP client asks for
whatever follows the cursor), drafts from the same text, `inference.answer`, then the client's
stop strings. A body without a `language` is read in the language its path or text shows
(`language_of`), so post-processing checks the parse as it does for the LSP server. A next
edit masks the region and re-fills it seeded with the region itself.
A file the settings exclude (its path from a repository-level header or Mercury's
current_file_path) gets no completion and no edit, and an excluded file a header carries is
never read into drafts. A request's time budget rides on its CancelFlag (the routes set it).
Knows nothing of HTTP beyond ApiError, which the routes turn into JSON.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from redraft.engine import CancelFlag, Cancelled, Stats

from ..core import context, guess_language, postprocess
from ..core.context import AskedMode, Mode, Snapshot, own_drafts, text_snapshot
from ..core.document import split_lines
from ..core.drafts import DraftIndex
from ..core.inference import Inference, answer, fill
from ..core.pipeline import out_of_time
from ..core.remote import RemoteUnavailable
from ..core.settings import ServerConfig
from . import templates
from .templates import Params

log = logging.getLogger(__name__)

URI = "untitled:redraft-http"  # what HTTP requests' documents are called; `document_uri` adds the file
FILE_START_LINES, FILE_START_CHARS = 3, 256  # what tells one file from another when no path is given
# An HTTP client asks for whatever follows the cursor: where the LSP server would answer
# nothing (mid-identifier, text right of the cursor), the rest of the line.
HTTP_MODE = AskedMode(Mode.LINE, "http", only_if_none=True)
MAX_EDIT_TOKENS = 512  # tokens of a code_to_edit region (Zed's Mercury asks for at most ~350)


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.message, self.headers, self.extra = status, message, headers, extra


@dataclass(frozen=True)
class ApiChoice:
    """One of the n choices of an HTTP completion, before it is shaped for the client's API."""

    text: str | None  # None: a next edit's "no edit" (JSON null)
    finish: str  # "stop" | "length"
    stats: Stats | None
    engine_ms: float = 0.0  # wall time of the engine call, windows and post-processing included
    language: str = ""  # the language the text was read as ("plaintext": no parse check), when it was read


# -- the engine side (runs on the inference executor) -----------------------------------


def document_uri(prefix: str, path: str = "") -> str:
    """The name a request's text goes by, and its engine cache key: one per file, so that a file's
    keystrokes reuse its context keys/values and different files - other users of one shared
    server - run side by side instead of one after another on a single key. From the path when
    the client gives one, else from the first complete lines before the cursor (a file's start
    stays put while one types further down; a moving window's start gets a key of its own,
    whose keys/values could not be reused anyway)."""
    if not path:
        lines = prefix[:FILE_START_CHARS].split("\n")[:-1][:FILE_START_LINES]  # complete lines only
        path = "\n".join(lines)
    if not path:
        return URI
    return f"{URI}#{hashlib.sha256(path.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def fim_snapshot(prefix: str, suffix: str, config: ServerConfig, language: str = "", path: str = "",
                 files: tuple[tuple[str, str], ...] = ()) -> Snapshot:
    """The LSP server's snapshot of `prefix + suffix` with the cursor between them; drafts also
    from the other `files` the prompt carries ((path, text), templates.repo_files), but never
    from one the settings exclude (exclude.py)."""
    snap, doc = text_snapshot(document_uri(prefix, path), prefix + suffix, len(prefix), config, language, path,
                              asked=HTTP_MODE)
    others = [(f"{URI}/{name}", DraftIndex(split_lines(text))) for name, text in files
              if text.strip() and not config.excludes(name)]
    return own_drafts(snap, doc, config, workspace=others)


def insertion(edit: postprocess.Edit, right: str) -> str:
    """What to insert at the cursor for clients that only insert: a completion that takes over
    auto-closed brackets right of the cursor (`edit.replace`) loses those characters and
    whatever it wrote after the last of them (it would land before them)."""
    if not edit.replace:
        return edit.text
    kept, taken, prev = [], 0, 0
    for k, ch in enumerate(edit.text, 1):
        now = postprocess.closers_replaced(edit.text[:k], right)
        if now > prev:
            taken, prev = taken + 1, now
            if taken == edit.replace:
                break
            continue
        kept.append(ch)
    return "".join(kept)


def complete_fim(inference: Inference, fim: templates.Fim, p: Params, config: ServerConfig, flag: CancelFlag,
                 on_preview: Callable[[int, str], None] | None = None,
                 engine_of: Callable[[], Any] | None = None) -> list[ApiChoice]:
    """n completions of one request, each through the completion pipeline (choice i samples
    with seed + i), by the Inference's engine or `engine_of()`'s (a model the request named)."""
    engine = _engine(inference) if engine_of is None else engine_of()
    if p.max_tokens is not None:
        config = replace(config, line_tokens=min(config.line_tokens, p.max_tokens),
                         block_tokens=min(config.block_tokens, p.max_tokens))
    if fim.path and config.excludes(fim.path):  # a file never read: nothing to complete there
        return [ApiChoice("", "stop", None)] * p.n
    snap = fim_snapshot(fim.prefix, fim.suffix, config, language_of(p, fim.path, fim.prefix, fim.suffix),
                        fim.path, fim.files)
    language = snap.syntax.name
    if snap.mode is Mode.NONE:
        return [ApiChoice("", "stop", None, language=language)] * p.n
    budget = config.block_tokens if snap.mode is Mode.BLOCK else config.line_tokens
    try:
        base = engine.sampler
    except RemoteUnavailable:  # a remote engine away: `answer` answers from drafts
        base = None
    if p.temperature is not None and base is not None:
        base = base.with_(temperature=p.temperature)
    out = []
    for i in range(p.n):
        preview = None if on_preview is None else (lambda text, step, masked, i=i: on_preview(i, text))
        t0 = time.perf_counter()
        o = answer(engine, snap, flag, preview, sampler=None if base is None else base.with_(seed=base.seed + i))
        ms = (time.perf_counter() - t0) * 1000
        if flag.is_set():
            raise Cancelled()
        text = "" if o.edit is None else insertion(o.edit, snap.right)
        cut = min((at for at in (text.find(s) for s in p.stop) if at >= 0), default=-1)
        if cut >= 0:
            text = text[:cut]
        full = cut < 0 and o.stats is not None and o.stats.span_tokens >= budget
        out.append(ApiChoice(text, "length" if full else "stop", o.stats, ms, language))
    return out


def rewrite(inference: Inference, ep: templates.EditPrompt, p: Params, config: ServerConfig, flag: CancelFlag,
            on_preview: Callable[[int, str], None] | None = None,
            engine_of: Callable[[], Any] | None = None) -> ApiChoice:
    """Mercury's next edit: the region masked and re-filled, conditioned on the rest of the
    file and seeded with the region itself; text None ("no edit") when the fill equals the
    region or the model abstains; 503 when a remote engine is away (no draft stands in for a rewrite)."""
    try:
        engine = _engine(inference) if engine_of is None else engine_of()
        return _rewrite(engine, ep, p, config, flag, on_preview)
    except RemoteUnavailable as e:
        raise ApiError(503, str(e)) from None


def _rewrite(engine, ep: templates.EditPrompt, p: Params, config: ServerConfig, flag: CancelFlag,
             on_preview: Callable[[int, str], None] | None) -> ApiChoice:
    t0 = time.perf_counter()
    if ep.path and config.excludes(ep.path):  # a file never read: no edit
        return ApiChoice(None, "stop", None)
    n = engine.count_tokens(ep.region)
    if n > MAX_EDIT_TOKENS:
        raise ApiError(400, f"the code_to_edit region has {n} tokens, more than {MAX_EDIT_TOKENS}")
    span = n + max(4, n // 4)  # room to grow
    snap = fim_snapshot(ep.before, ep.after, replace(config, drafts="off"),
                        language_of(p, ep.path, ep.before + ep.region, ep.after), ep.path)
    language = snap.syntax.name
    ctx = context.build(snap, engine.count_tokens, engine.context_budget(span))
    sampler = None if p.temperature is None else engine.sampler.with_(temperature=p.temperature)
    result = fill(engine, snap, ctx, span, [ep.region] if ep.region.strip() else [], flag,
                  None if on_preview is None else (lambda text, step, masked: on_preview(0, text)), sampler)
    text, ms = result.text, (time.perf_counter() - t0) * 1000
    # Out of time, the fill stopped part-way: a region cut short is no edit.
    if result.abstained or out_of_time(flag) or text.rstrip() == ep.region.rstrip():
        return ApiChoice(None, "stop", result.stats, ms, language)
    if ep.region.endswith("\n") and not text.endswith("\n"):
        text += "\n"  # the region's line end stays where it was
    return ApiChoice(text, "stop", result.stats, ms, language)


def language_of(p: Params, path: str, before: str, after: str) -> str:
    """The language id a request's text is read as: the body's `language` when it names one
    (it always wins), else the one its file's path or its text shows (guess_language.infer),
    else "" (plain text). The snapshot then goes the LSP server's way, post-processing and all."""
    return p.language or guess_language.infer(path, before, after) or ""


def _engine(inference: Inference):
    if inference.engine is None:
        raise ApiError(503, inference.load_error or "the model is still loading")
    return inference.engine
