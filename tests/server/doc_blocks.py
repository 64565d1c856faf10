"""The shell examples of README.md and docs/*.md, read as a user reads them: fenced sh / bash /
console blocks, split into commands (a command runs on while a quote is open or a line ends in
a backslash), each with the answer its comment promises:

    curl ... -d '{...}'        # "text": "getLogger(__name__)"     the JSON field's value
    redraft complete F:8:28
    # prints getLogger(__name__)                                    stdout, stripped

A comment on the command's last line or on the lines right after it is the command's; one
that is neither form ("# online", "# in one terminal") promises nothing. In console blocks
commands start with `$ ` and the lines after one are the output it promises.

Pure text handling, no processes: tests/server/test_doc_examples.py runs what this finds.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

SHELLS = ("sh", "bash", "console")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
FIELD = re.compile(r'^(?:last chunk:\s*)?"(?P<key>\w+)":\s*(?P<value>.+)$')
LABEL_CHARS = 60
NOTHING = object()  # a command that promises no particular answer


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    text: str  # dedented body

    @property
    def label(self) -> str:
        """The block's name in the test's lists: its first command line without its comment,
        cut at LABEL_CHARS characters."""
        first = next(ln for ln in self.text.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))
        first = " ".join(split_comment(first.removeprefix("$ "))[0].split())
        return first if len(first) <= LABEL_CHARS else first[:LABEL_CHARS - 1] + "…"


@dataclass(frozen=True)
class Command:
    code: str  # what bash runs, without the comment
    expect: object  # NOTHING, ("field", key, value) or ("prints", text)


def shell_blocks(root: Path, paths: list[Path]) -> list[Block]:
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m["lang"] in SHELLS:
                line = text.count("\n", 0, m.start()) + 1
                out.append(Block(str(path.relative_to(root)), line, m["lang"], textwrap.dedent(m["body"])))
    return out


def split_comment(text: str) -> tuple[str, str]:
    """(code, comment) of a shell text: the first `#` outside quotes that starts a word."""
    quote, escaped = "", False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def _complete(text: str) -> bool:
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(split_comment(text)[0])
    except ValueError:  # a quote still open: the command goes on
        return False
    return True


def expectation(comments: list[str]) -> object:
    for c in comments:
        if c.startswith("prints "):
            return ("prints", c.removeprefix("prints ").strip())
        m = FIELD.match(c)
        if m:
            return ("field", m["key"], json.loads(m["value"]))
    return NOTHING


def commands(block: Block) -> list[Command]:
    """The block's commands in order, each with the answer its comments promise."""
    if block.lang == "console":
        return _console(block.text)
    out: list[tuple[str, list[str]]] = []
    pending = ""
    for line in block.text.splitlines():
        if not pending and not line.strip():
            continue
        if not pending and line.lstrip().startswith("#"):
            if out:
                out[-1][1].append(line.lstrip()[1:].strip())
            continue
        pending = f"{pending}\n{line}" if pending else line
        if _complete(pending):
            code, comment = split_comment(pending)
            out.append((code, [comment] if comment else []))
            pending = ""
    if pending:
        raise ValueError(f"{block.path}:{block.line}: a command never ends: {pending[:80]!r}")
    return [Command(code, expectation(comments)) for code, comments in out]


def _console(text: str) -> list[Command]:
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((split_comment(line[2:])[0], []))
        elif out and line.strip():
            out[-1][1].append(line.rstrip())
    return [Command(code, ("prints", "\n".join(lines)) if lines else NOTHING) for code, lines in out]
