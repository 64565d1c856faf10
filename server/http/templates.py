"""Requests as HTTP clients write them: prompts back into the text around the cursor, and
the body's fields into Params.

Fill-in-the-middle clients (Zed's `ollama` and `open_ai_compatible_api` providers, Continue,
scripts) send one string with the sentinels of the model family they think they talk to;
redraft's engine wants the prefix and the suffix themselves, so `split` undoes the template.
The families, as Zed writes them:

  qwen, codegemma   <|fim_prefix|>PREFIX<|fim_suffix|>SUFFIX<|fim_middle|>
  starcoder         <fim_prefix>PREFIX<fim_suffix>SUFFIX<fim_middle>   (Zed's default)
  codellama         <PRE> PREFIX <SUF>SUFFIX <MID>
  deepseek          <｜fim▁begin｜>PREFIX<｜fim▁hole｜>SUFFIX<｜fim▁end｜>
  codestral         [SUFFIX]SUFFIX[PREFIX]PREFIX
  glm               <|code_prefix|>PREFIX<|code_suffix|>SUFFIX<|code_middle|>

Either order of prefix and suffix is read (PSM and SPM). Text before the first sentinel is a
repository-level header: the files it carries (`<|file_sep|>path` and the like: `repo_files`)
are kept apart from the prefix, with the path of the file being completed, the rest dropped;
text after the middle sentinel is the start of the middle, so it joins the prefix. A prompt
with no known sentinel is all prefix.

`parse_edit` reads Mercury's next-edit prompt (Inception's `/v1/edit/completions`): the file
between `<|current_file_content|>` tags, headed by `current_file_path: PATH`, with the
region to rewrite inside `<|code_to_edit|>` tags and the cursor marked `<|cursor|>`.

`ollama_params`, `openai_params` and `edit_prompt` read the rest of a request body (JSON
already decoded); a field of the wrong type raises BadRequest.

Pure functions: they know nothing of HTTP transport, documents or models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_N = 8  # choices per request
MAX_STOPS = 16  # stop strings per request (OpenAI takes 4; Zed sends 5)


class BadRequest(ValueError):
    """What the client sent cannot be read (the HTTP front answers 400)."""

# name, prefix sentinel, suffix sentinel, middle sentinel ("" when the family has none)
FAMILIES = (
    ("qwen", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("codellama", "<PRE>", "<SUF>", "<MID>"),
    ("deepseek", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    ("codestral", "[PREFIX]", "[SUFFIX]", ""),
    ("glm", "<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"),
)


@dataclass(frozen=True)
class Fim:
    prefix: str
    suffix: str
    family: str  # the template that matched; "plain" when none did
    path: str = ""  # the file being completed, when a repository-level header names it
    files: tuple[tuple[str, str], ...] = ()  # (path, text) of the header's other files


# Repository-level prompts (Qwen2.5-Coder, StarCoder) head the FIM part with files, each
# `SEP path\ntext`; the last names the file being completed (its text is the FIM part).
FILE_SEPS = ("<|file_sep|>", "<file_sep>", "<filename>")
MAX_FILES, MAX_FILE_CHARS = 8, 16_000  # of a header's files, the nearest the cursor kept


def repo_files(head: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(the completed file's path, (path, text) of the files before it) from the text ahead of
    the FIM sentinels; ("", ()) when it names no file."""
    sep = next((s for s in FILE_SEPS if s in head), None)
    if sep is None:
        return "", ()
    parts = [p.split("\n", 1) for p in head.split(sep)[1:]]
    entries = [(p[0].strip(), p[1] if len(p) > 1 else "") for p in parts]
    *others, (path, _) = entries
    kept = tuple((f, t[:MAX_FILE_CHARS]) for f, t in others[-MAX_FILES:] if f)
    return path, kept


def split(prompt: str, suffix: str | None = None) -> Fim:
    """Prefix and suffix of a completion request: `prompt` + `suffix` when the client sends a
    suffix (OpenAI's and Inception's `suffix` field), else the template inside `prompt`."""
    if suffix is not None:
        return Fim(prompt, suffix, "plain")
    for name, pre, suf, mid in FAMILIES:
        p, s = prompt.find(pre), prompt.find(suf)
        if p < 0:
            continue
        fim = _split_at(prompt, name, pre, suf, mid, p, s)
        path, files = repo_files(prompt[:p if s < 0 else min(p, s)])
        return Fim(fim.prefix, fim.suffix, name, path, files)
    return Fim(prompt, "", "plain")


def _split_at(prompt: str, name: str, pre: str, suf: str, mid: str, p: int, s: int) -> Fim:
    """`split` for the family whose prefix sentinel is at `p` (suffix sentinel at `s`, or -1)."""
    pad = " " if name == "codellama" else ""  # its sentinels carry a space: `<PRE> p <SUF>s <MID>`
    if s < 0:  # no suffix sentinel: all prefix
        head, started = _cut_middle(prompt[p + len(pre):], mid, pad)
        return Fim(_strip(head, pad, pad) + started, "", name)
    if p < s:  # prefix, suffix, middle
        tail, started = _cut_middle(prompt[s + len(suf):], mid, pad)
        return Fim(_strip(prompt[p + len(pre):s], pad, pad) + started, tail, name)
    head, started = _cut_middle(prompt[p + len(pre):], mid, "")  # suffix, prefix, middle
    return Fim(head + started, prompt[s + len(suf):p], name)


def _cut_middle(text: str, mid: str, pad: str) -> tuple[str, str]:
    """(text before the middle sentinel, text after it): the latter starts the middle."""
    at = text.rfind(mid) if mid else -1
    if at < 0:
        return text, ""
    return _strip(text[:at], "", pad), text[at + len(mid):]


def _strip(text: str, lead: str, trail: str) -> str:
    if lead and text.startswith(lead):
        text = text[len(lead):]
    if trail and text.endswith(trail):
        text = text[:-len(trail)]
    return text


CURRENT_FILE = ("<|current_file_content|>", "<|/current_file_content|>")
CODE_TO_EDIT = ("<|code_to_edit|>", "<|/code_to_edit|>")
CURSOR = "<|cursor|>"
PATH_HEAD = "current_file_path: "


@dataclass(frozen=True)
class EditPrompt:
    before: str  # the file's text before the region
    region: str  # the code to rewrite, without the cursor tag
    after: str  # the file's text after the region
    cursor: int  # offset of the cursor inside `region`, -1 when not marked
    path: str  # current_file_path, "" when absent


def parse_edit(prompt: str) -> EditPrompt:
    """The parts of a Mercury next-edit prompt; ValueError when it has no code_to_edit block."""
    text = _between(prompt, *CURRENT_FILE)
    path = ""
    if text.startswith(PATH_HEAD):
        head, _, text = text.partition("\n")
        path = head[len(PATH_HEAD):].strip()
    start, end = text.find(CODE_TO_EDIT[0]), text.find(CODE_TO_EDIT[1])
    if start < 0 or end < start:
        raise BadRequest(f"the prompt has no {CODE_TO_EDIT[0]} ... {CODE_TO_EDIT[1]} block")
    # Each tag adds a newline of its own after it; the file's text is what lies around them.
    region = _drop_newline(text[start + len(CODE_TO_EDIT[0]):end])
    after = _drop_newline(text[end + len(CODE_TO_EDIT[1]):])
    cursor = region.find(CURSOR)
    if cursor >= 0:
        region = region[:cursor] + region[cursor + len(CURSOR):]
    return EditPrompt(text[:start], region, after, cursor, path)


def _between(text: str, open_tag: str, close_tag: str) -> str:
    """The text inside the tags (from the open tag's line end), or all of it when absent."""
    a = text.find(open_tag)
    if a < 0:
        return text
    b = text.find(close_tag, a)
    return _drop_newline(text[a + len(open_tag):b if b >= 0 else len(text)])


def _drop_newline(text: str) -> str:
    return text[1:] if text.startswith("\n") else text


@dataclass(frozen=True)
class Params:
    max_tokens: int | None = None
    temperature: float | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    stream: bool = False
    diffusing: bool = False  # stream the whole draft after every denoising step
    language: str = ""  # an extension of the originals: the language id of the text, when known


def ollama_params(body: dict) -> tuple[Fim, Params]:
    """/api/generate: prompt (+ suffix), options.num_predict / temperature / stop; Ollama streams
    unless told not to."""
    opts = field(body, "options", dict, {})
    predict = field(opts, "num_predict", int, None)
    fim = split(field(body, "prompt", str, ""), field(body, "suffix", str, None))
    return fim, Params(max_tokens=predict if predict is not None and predict > 0 else None,  # -1, -2: no limit
                       temperature=_temperature(opts), stop=_stop(opts.get("stop")),
                       stream=field(body, "stream", bool, True), diffusing=field(body, "diffusing", bool, False),
                       language=field(body, "language", str, ""))


def openai_params(body: dict) -> tuple[Fim, Params]:
    """/v1/completions and /v1/fim/completions: prompt (a string or a list of one) + suffix,
    max_tokens, temperature, stop, n."""
    prompt = body.get("prompt", "")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string (or a list of one string)")
    n, max_tokens = field(body, "n", int, 1), field(body, "max_tokens", int, None)
    if not 1 <= n <= MAX_N:
        raise BadRequest(f"'n' must be in 1..{MAX_N}")
    if max_tokens is not None and max_tokens < 1:
        raise BadRequest("'max_tokens' must be at least 1")
    return split(prompt, field(body, "suffix", str, None)), Params(
        max_tokens, _temperature(body), _stop(body.get("stop")), n, field(body, "stream", bool, False),
        field(body, "diffusing", bool, False), field(body, "language", str, ""))


def edit_prompt(body: dict) -> tuple[EditPrompt, Params]:
    """/v1/edit/completions: a chat-completions body whose last user message holds the prompt."""
    messages = body.get("messages")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"] \
        if isinstance(messages, list) else []
    if not users:
        raise BadRequest("'messages' must hold a user message with the prompt")
    content = users[-1].get("content")
    if isinstance(content, list):  # text parts
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(content, str):
        raise BadRequest("the user message's 'content' must be a string or a list of text parts")
    return parse_edit(content), Params(temperature=_temperature(body), stream=field(body, "stream", bool, False),
                                       diffusing=field(body, "diffusing", bool, False),
                                       language=field(body, "language", str, ""))


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "an object"}


def field(d: dict, key: str, kind: type, default: Any) -> Any:
    """d[key] when it is of `kind` (JSON null or absent: `default`); BadRequest otherwise."""
    v = d.get(key)
    if v is None:
        return default
    ok = isinstance(v, (int, float)) if kind is float else isinstance(v, kind)
    if not ok or (isinstance(v, bool) and kind is not bool):
        raise BadRequest(f"{key!r} must be {_KINDS[kind]}, got {json.dumps(v)[:40]}")
    return v


def _temperature(d: dict) -> float | None:
    t = field(d, "temperature", float, None)
    if t is not None and not 0 <= t <= 2:
        raise BadRequest("'temperature' must be in 0..2")
    return None if t is None else float(t)


def _stop(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise BadRequest("'stop' must be a string or a list of strings")
    if len(v) > MAX_STOPS:
        raise BadRequest(f"'stop' holds {len(v)} strings, more than {MAX_STOPS}")
    return tuple(s for s in v if s)
