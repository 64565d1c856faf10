"""Post-processing: from the engine's raw span text to an edit worth showing, or nothing.

In order: cut at the end of the syntactic unit (LINE/ARGS: the first line; BLOCK: the
indented body, or up to the closing brace, at most `max_lines` lines), keep the editor's
indentation, drop text that repeats the suffix (the rest of the line, or the next lines),
let the completion replace auto-closed brackets and quotes right of the cursor instead
of duplicating them (`Edit.replace` characters), and reject a completion whose insertion
adds tree-sitter parse errors to the context window. Returns None when nothing is left.

Works on the frozen Snapshot and Context only; it knows nothing of LSP (the caller turns
`Edit` into UTF-16 ranges) or of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .context import Context, Mode, Snapshot
from .languages import CLOSERS, OPEN_CLOSE, QUOTES, count_errors, new_parser


@dataclass(frozen=True)
class Edit:
    text: str  # inserted at the cursor
    replace: int  # characters right of the cursor that `text` replaces (auto-closed brackets/quotes)


def _indent_width(line: str) -> int:
    return len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip(" "))


@dataclass(frozen=True)
class Unit:
    """Where a completion's syntactic unit ends: the one rule the server cuts and stops by,
    and the evaluation scores by (eval/metrics.py)."""

    mode: Mode
    header_indent: str  # indentation of the block's header line (BLOCK)
    max_lines: int  # lines of a BLOCK body at most
    braces: bool = False  # blocks close with "}" (not by indentation)
    right: str = ""  # the cursor line right of the cursor
    indented: bool = False  # the editor already indented the cursor: the first line's indent goes

    @classmethod
    def of(cls, snap: Snapshot) -> "Unit":
        return cls(snap.mode, snap.header_indent, snap.config.max_lines, not snap.syntax.indent_blocks, snap.right,
                   bool(snap.left) and snap.left.strip() == "")

    def cut(self, text: str) -> str:
        """`text` cut at the end of the unit (LINE/ARGS: the first line; BLOCK: the indented
        body, or up to the closing brace, at most `max_lines` lines)."""
        text = text.replace("\x00", "").replace("\r\n", "\n")
        if self.mode in (Mode.LINE, Mode.ARGS):
            return text.split("\n", 1)[0].rstrip()
        lines = text.split("\n")
        if self.indented:  # don't indent twice
            lines[0] = lines[0].lstrip(" \t")
        header = _indent_width(self.header_indent)
        kept, tail = [lines[0]], None
        for line in lines[1:]:
            if len(kept) >= self.max_lines:
                break
            if line.strip() and _indent_width(line) <= header:  # dedent: the body ended
                if self.braces and line.strip().startswith("}"):
                    # The block's own closing brace: keep it unless one is already right of the cursor,
                    # in which case end on the header's indentation so that brace lands in place.
                    tail = self.header_indent if self.right.strip().startswith("}") else line
                break
            kept.append(line)
        while len(kept) > 1 and not kept[-1].strip():
            kept.pop()
        if not any(ln.strip() for ln in kept):
            return ""
        return "\n".join(kept + ([tail] if tail is not None else []))

    def ended(self, text: str) -> bool:
        """True once `text`, a completion so far, already holds the end of the unit `cut`
        keeps (the engine then stops: the rest would be cut anyway)."""
        if self.mode in (Mode.LINE, Mode.ARGS):
            return "\n" in text
        lines = text.split("\n")
        header = _indent_width(self.header_indent)
        for n, line in enumerate(lines):
            if n and line.strip() and _indent_width(line) <= header:
                return True  # a dedent (settled once the line has a non-blank character)
        return len(lines) - 1 >= self.max_lines  # that many complete lines


def trim_unit(snap: Snapshot, text: str) -> str:
    """Cut `text` at the end of the syntactic unit the snapshot's mode asks for."""
    return Unit.of(snap).cut(text)


def unit_ended(snap: Snapshot, text: str) -> bool:
    """True once `text` already holds the end of the snapshot's unit."""
    return Unit.of(snap).ended(text)


def drop_suffix_repeats(snap: Snapshot, ctx: Context, text: str, replace: int) -> str:
    """Remove the part of `text` that repeats what already follows the cursor (after the
    `replace` auto-closed characters the completion takes over)."""
    rest = snap.right[replace:].rstrip()
    if "\n" not in text:
        head = text[:-len(rest)] if rest else text
        if rest and text.endswith(rest) and head and _unclosed(head) <= _unclosed(text):
            return head  # (unless the repeated tail closes a bracket the completion opened)
        if rest and rest.startswith(text.rstrip()):
            return ""  # the line already says it
        return text
    following = [ln.strip() for ln in ctx.suffix.split("\n")[1:] if ln.strip()]
    if following:
        lines = text.split("\n")
        for i in range(1, len(lines)):
            if lines[i].strip() and lines[i].strip() == following[0]:
                return "\n".join(lines[:i]).rstrip(" \t")
    return text


def _unclosed(text: str) -> int:
    stack: list[str] = []
    for ch in text:
        if ch in OPEN_CLOSE:
            stack.append(OPEN_CLOSE[ch])
        elif ch in CLOSERS and stack and stack[-1] == ch:
            stack.pop()
    return len(stack)


def closers_replaced(text: str, right: str) -> int:
    """How many auto-closed brackets/quotes at the start of `right` the completion itself closes."""
    ahead = ""
    for ch in right:
        if ch in CLOSERS or ch in QUOTES:
            ahead += ch
        else:
            break
    if not ahead:
        return 0
    stack: list[str] = []
    j = 0
    for ch in text:
        if ch in OPEN_CLOSE:
            stack.append(OPEN_CLOSE[ch])
        elif ch in CLOSERS:
            if stack and stack[-1] == ch:
                stack.pop()
            elif j < len(ahead) and ahead[j] == ch:
                j += 1
        elif ch in QUOTES:
            if stack and stack[-1] == ch:
                stack.pop()
            elif j < len(ahead) and ahead[j] == ch:
                j += 1
            else:
                stack.append(ch)
    return j


def adds_errors(snap: Snapshot, ctx: Context, text: str, replace: int) -> bool:
    """True when the window with `text` inserted parses with more errors than without."""
    grammar = snap.syntax.grammar
    if grammar is None:
        return False
    parser = new_parser(grammar)
    before = (ctx.prefix + ctx.suffix).encode("utf-8", "replace")
    after = (ctx.prefix + text + ctx.suffix[replace:]).encode("utf-8", "replace")
    return count_errors(parser.parse(after)) > count_errors(parser.parse(before))


def finish(snap: Snapshot, ctx: Context, raw: str) -> Edit | None:
    text = trim_unit(snap, raw)
    replace = closers_replaced(text, snap.right)
    text = drop_suffix_repeats(snap, ctx, text, replace)
    if not text.strip():
        return None
    replace = min(replace, closers_replaced(text, snap.right))
    if adds_errors(snap, ctx, text, replace):
        return None
    return Edit(text, replace)
