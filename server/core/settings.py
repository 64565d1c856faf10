"""ServerConfig: the server's settings, built from the CLI, `initializationOptions` and
`workspace/didChangeConfiguration`, validated field by field.

`parse(options, base)` returns a new frozen config plus a list of problems: an unknown
key or a bad value keeps the base value for that field and adds one line to the problems,
which the server shows once. Options may be given flat or under a "redraft" key, in
camelCase or snake_case. This is the single table of defaults for the server.

`parse_client(options, current, trusted)` is the same for settings from the editor, which a
repository's own editor settings can reach: those that change where code goes or what is read
are taken only when they are safe next to `trusted` (the command line's config, the user's own
level): an engine on this machine, a model among the user's models, excludes that only add to
the command line's, the secret-file defaults on. Anything else is refused with one line and the
current value kept (trust.py says what is safe).

It knows nothing of LSP messages or of the engine's internals (model and device are
passed through as strings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from . import exclude, trust


@dataclass(frozen=True)
class ServerConfig:
    enable: tuple[tuple[str, bool], ...] = (("*", True),)  # language id -> enabled; "*" = the rest
    max_lines: int = 8  # lines of a multi-line (block) completion
    threshold: float | None = None  # unmasking confidence threshold; None = the model's default
    model: str | None = None  # checkpoint folder or name; None = the shipped default
    device: str = "cpu"
    dtype: str = "auto"
    line_tokens: int = 16  # span budget for rest-of-line and argument completions
    block_tokens: int = 48  # span budget for a new block body
    # Prefix + suffix (+ extra) window budget. A new document's first request encodes all of it:
    # 320 tokens took cold answers from 82-117 to 62-70 ms (p50) on a 2-core CPU at about the same
    # quality as the whole 512-token window (docs/evaluation.md); a GPU engine affords more.
    context_tokens: int = 320
    suffix_share: float = 0.25  # of context_tokens, given to the suffix
    # Complete inside comments too, from drafts alone, as inside strings. A quarter to a third of
    # the lines of TypeScript, Go and Rust are comments (doc comments, their examples, links),
    # where drafts were right about as often as in code (docs/evaluation.md).
    comments: bool = True
    # Complete inside strings and docstrings, as Copilot and Zed do, from drafts alone (the
    # model added nothing there): right more often than the plain copy (docs/evaluation.md).
    strings: bool = True
    drafts: str = "seeded"  # drafts from the code itself: "seeded" (model revises them), "only" (no model), "off"
    max_drafts: int = 4  # draft candidates per request
    # At a partly typed name, complete it from the names in the file (and the language's
    # built-ins) where the model's answer makes an unknown word of it (names.py).
    names: bool = True
    # The cache model: tokens copied from matching code mixed into the model's predictions. Off
    # by default: with the shipped model it made held-out answers no better (README).
    cache: bool = False
    extra_context: bool = True  # definitions from other open documents and recent edits, ahead of the prefix
    # Drafts from the workspace's files that are not open (when the client names a root folder;
    # indexed once, in the background, within bounds: workspace.py)
    workspace_files: bool = True
    extra_share: float = 0.25  # of the context budget, at most, for the extra context
    next_edit: bool = True  # compute next-edit suggestions ahead once typing pauses
    # Their own time budget, in milliseconds from the pause: judged one place per engine job,
    # behind any inline completion asked meanwhile, so a busy machine delays them instead of
    # the completions (and a budget too short for it counts in `edits_late`).
    next_edit_time: int = 3000
    # A proposed edit is kept when its mean log-prob per token is at least the text's as it is plus
    # this: -1.0 keeps edits up to 1 nat per token less likely than the text; higher is stricter.
    edit_margin: float = -1.0
    # Where no rule follows an edit, the model rewrites the line after it (refill.py). Off: it
    # lowered next-edit precision on real release diffs (README).
    next_edit_refill: bool = False
    stream_previews: bool = False  # send `redraft/preview` notifications while a completion denoises
    # A remote engine (`redraft serve --http` elsewhere, or the cluster) instead of a model in
    # this process: http(s)://HOST:PORT; model, device and dtype are then the remote's.
    engine_url: str | None = None
    # The time budget of a request, in milliseconds from its arrival (waiting for the engine
    # included), as llama.vim's t_max_predict_ms: the engine stops at the next denoising step
    # past it and shows what it has only where its confidence and post-processing accept it.
    max_time: int = 500
    # Files never read into anything (globs; a name without "/" matches a file name anywhere),
    # on top of the usual secret files (exclude.SECRETS) unless exclude_secrets is false.
    exclude: tuple[str, ...] = ()
    exclude_secrets: bool = True
    # Folders whose model checkpoints the editor's settings may name (`--models-dir`; the
    # command line only). The shipped models, the Hugging Face cache (`redraft pull`) and the
    # command line's own `--model` are the user's models too (trust.py).
    models_dirs: tuple[str, ...] = ()

    def enabled(self, language: str) -> bool:
        table = dict(self.enable)
        return table.get(language, table.get("*", True))

    def excludes(self, uri_or_path: str) -> bool:
        """Whether a file (a URI or a path) is one redraft never reads (exclude.py)."""
        return exclude.matcher(self.exclude, self.exclude_secrets).matches(uri_or_path)


_INT_RANGES = {"max_lines": (1, 200), "max_drafts": (1, 16), "line_tokens": (1, 512), "block_tokens": (1, 1024),
               "context_tokens": (16, 32768), "max_time": (1, 60_000),
               "next_edit_time": (1, 60_000)}
_DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
_RENAMED = {"stream_drafts": "stream_previews"}  # earlier names clients may still send


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _check(name: str, value: Any) -> Any:
    """The validated value, or raises ValueError saying what is wrong."""
    if name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"must be an integer in {lo}..{hi}")
        return value
    if name == "threshold" and value is None:
        return None
    if name in ("threshold", "suffix_share", "extra_share"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError("must be a number in 0..1")
        return float(value)
    if name == "drafts":
        if value not in ("seeded", "only", "off"):
            raise ValueError("must be one of seeded, only, off")
        return value
    if name == "edit_margin":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -100.0 <= value <= 100.0:
            raise ValueError("must be a number in -100..100")
        return float(value)
    if name in ("exclude", "models_dirs"):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(g, str) and g.strip() for g in value):
            raise ValueError("must be a list of glob patterns" if name == "exclude" else "must be a list of folders")
        return tuple(g.strip() for g in value)
    if name in ("comments", "strings", "extra_context", "stream_previews", "next_edit", "next_edit_refill", "cache",
                "workspace_files", "names", "exclude_secrets"):
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value
    if name == "engine_url":
        if value is not None and (not isinstance(value, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value)):
            raise ValueError("must be an http:// or https:// URL")
        return value
    if name in ("model",):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError("must be a checkpoint folder or name")
        return value
    if name == "device":
        if not isinstance(value, str) or not re.fullmatch(r"cpu|cuda(:\d+)?|mps", value):
            raise ValueError("must be cpu, cuda, cuda:N or mps")
        return value
    if name == "dtype":
        if value not in _DTYPES:
            raise ValueError(f"must be one of {', '.join(_DTYPES)}")
        return value
    if name == "enable":
        if isinstance(value, bool):
            return (("*", value),)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, bool)
                                                  for k, v in value.items()):
            raise ValueError('must be true/false or an object of language id -> true/false')
        return tuple(sorted(value.items()))
    raise KeyError(name)


def parse(options: Any, base: ServerConfig | None = None) -> tuple[ServerConfig, list[str]]:
    """A config from client options over `base`, and the problems found (bad keys keep base values)."""
    base = base or ServerConfig()
    if options is None:
        return base, []
    if not isinstance(options, dict):
        return base, [f"settings must be an object, got {type(options).__name__}"]
    if isinstance(options.get("redraft"), dict):
        options = options["redraft"]
    known = {f.name for f in fields(ServerConfig)}
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in options.items():
        name = _snake(str(key))
        name = _RENAMED.get(name, name)
        if name not in known:
            problems.append(f"unknown setting {key!r}")
            continue
        try:
            changes[name] = _check(name, value)
        except ValueError as e:
            problems.append(f"setting {key!r}={value!r} {e}; keeping {getattr(base, name)!r}")
    return replace(base, **changes), problems


def parse_client(options: Any, current: ServerConfig, trusted: ServerConfig
                 ) -> tuple[ServerConfig, list[str], list[str]]:
    """A config from the editor's options over `current`: (config, problems, refusals). A
    refusal is a setting that would send code elsewhere or read what the user did not choose
    (trust.py); it keeps the current value. `trusted` is the command line's config."""
    new, problems = parse(options, current)
    refusals: list[str] = []
    keep: dict[str, Any] = {}
    names = _given(options)
    for name, why in trust.refusals(new, current, trusted):
        refusals.append(f"setting {names.get(name, name)[:40]!r}={_short(getattr(new, name))} refused: {why}; "
                        f"keeping {_short(getattr(current, name))}")
        keep[name] = getattr(current, name)
    if new.model != current.model and "model" not in keep:  # the folder that was checked is the one loaded
        keep["model"] = trust.canonical_model(new.model, trusted)
    # The command line's globs always hold: the editor's add to them.
    keep["exclude"] = tuple(dict.fromkeys(trusted.exclude + keep.get("exclude", new.exclude)))
    return replace(new, **keep), problems, refusals


def _short(value: Any, chars: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= chars else text[:chars] + "..."


def _given(options: Any) -> dict[str, str]:
    """Field name -> the key the client spelt it with (for messages)."""
    if not isinstance(options, dict):
        return {}
    if isinstance(options.get("redraft"), dict):
        options = options["redraft"]
    return {_RENAMED.get(_snake(str(k)), _snake(str(k))): str(k) for k in options}
