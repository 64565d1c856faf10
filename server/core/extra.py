"""Extra context: what the model sees ahead of the prefix besides the document itself.

Two parts, rendered by the engine's prompt format (engine/prompt.py, which training uses too):
  * recent edits of this document, oldest first, as a `<|history|>` block — only finished
    events: the one still growing at the cursor would change the text on every keystroke;
  * definitions from other open documents of names used near the cursor, each as
    `<|file_sep|>path` and the definition's first lines.

The extra segment comes first in the sequence, so any change to it costs the whole
context's keys/values: everything here is chosen to stay the same while the user types
(sorted, built from whole definitions, recomputed per document version and cached).

Size: a document over MAX_DOC_BYTES contributes no definitions (and, at the cursor, filters
none out), logged once per document; an edit event shows at most the engine's EVENT_LINES
lines a side, and only those are read, so a 5 MB paste costs no more than a keystroke.

Runs on the event loop, where documents are current; knows nothing of LSP or the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from redraft.engine import prompt

from .document import Document
from .history import EditEvent

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PLAIN_DEF = re.compile(r"^[ \t]*(?:async\s+)?(?:def|class|function|func|fn|struct|interface|type)\s+([A-Za-z_]\w*)")
NEAR_LINES = 20  # names used in this many lines above the cursor (and left of it) count
NEAR_CHARS = 8 << 10  # ... within this many characters before the cursor
# Characters of an edit event's side that are rendered at most: more than half the largest
# extra-context budget (32k tokens, ~98k characters), so a history holding such an event is
# dropped either way; a 5 MB single-line paste is then not copied per request.
SHOWN_CHARS = 64 << 10
DEF_LINES = 4  # lines of a definition shown
MAX_DEFS = 6
# Documents larger than this are not scanned for definitions. The cursor's own document is
# rescanned on every keystroke (its version changes): ~5 ms at 256 KB of stdlib Python on the
# 2-core development machine, ~21 ms at 1 MB.
MAX_DOC_BYTES = 256 << 10


@dataclass(frozen=True)
class Definition:
    name: str
    row: int
    text: str  # its first DEF_LINES lines


DefinitionCache = dict  # uri -> (version, name -> Definition); owned by the session


def definitions(doc: Document, cache: DefinitionCache) -> dict[str, Definition]:
    """Top-level (and class-level) definitions of a document, by name; cached per version."""
    hit = cache.get(doc.uri)
    if hit is not None and hit[0] == doc.version:
        return hit[1]
    out: dict[str, Definition] = {}
    if doc.size_bytes > MAX_DOC_BYTES:
        doc.note_limit("definitions", f"over {MAX_DOC_BYTES >> 10} KB: no definitions read from it")
    else:
        rows = _tree_rows(doc) if doc.tree is not None else _plain_rows(doc)
        for name, row in rows:
            if name not in out:
                lines = [doc.line_body(r) for r in range(row, min(row + DEF_LINES, len(doc.lines)))]
                out[name] = Definition(name, row, "\n".join(lines).rstrip() + "\n")
    cache[doc.uri] = (doc.version, out)
    return out


def _tree_rows(doc: Document):
    """(name, row) of definition nodes two levels deep, read from the grammar's `name` fields."""
    stack = [(c, 0) for c in doc.tree.root_node.children]
    while stack:
        node, depth = stack.pop(0)
        inner = node.child_by_field_name("definition") or node  # Python's decorated_definition
        if inner.type.endswith(("definition", "declaration", "declarator", "item", "specifier")):
            name = inner.child_by_field_name("name")
            if name is not None and name.text is not None:
                yield name.text.decode("utf-8", "replace"), node.start_point[0]
        if depth < 2:
            body = inner.child_by_field_name("body")
            if body is not None:
                stack.extend((c, depth + 1) for c in body.children)


def _plain_rows(doc: Document):
    for r, line in enumerate(doc.lines):
        m = PLAIN_DEF.match(line)
        if m:
            yield m.group(1), r


def names_near(doc: Document, row: int, col: int) -> set[str]:
    """Names in the NEAR_LINES lines above the cursor and left of it, in at most NEAR_CHARS
    characters of them (a longer stretch is minified text: only its end counts)."""
    parts = [doc.lines[row][max(0, col - NEAR_CHARS):col]]
    size = len(parts[0])
    for r in range(row - 1, max(-1, row - NEAR_LINES - 1), -1):
        if size >= NEAR_CHARS:
            break
        line = doc.lines[r]
        parts.append(line[-NEAR_CHARS:])
        size += len(parts[-1])
    text = "".join(reversed(parts))
    if size > NEAR_CHARS:  # not from a name's middle
        text = text[-NEAR_CHARS:]
        text = text[len(text) - len(text.lstrip("0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")):]
    return set(NAME.findall(text))


def finished_history(events: list[EditEvent], cursor_row: int) -> str:
    """Finished edit events, for completions: the one still being typed at the cursor would
    change the extra segment on every keystroke."""
    done = list(events)
    if done and done[-1].first_line - 8 <= cursor_row <= done[-1].last_line + 8:
        done = done[:-1]  # still being typed
    return edit_history(done)


def edit_history(events: list[EditEvent]) -> str:
    """Edit events, oldest first, in the engine's prompt format."""
    return prompt.render_history([(_shown(ev.removed), _shown(ev.inserted)) for ev in events])


def _shown(text: str) -> str:
    """What render_history reads of one side of an event: its first EVENT_LINES lines, plus a
    stand-in line after them when more than whitespace follows, so a huge paste is never split
    into lines whole; and at most SHOWN_CHARS characters of them."""
    end = -1
    for _ in range(prompt.EVENT_LINES):
        end = text.find("\n", end + 1, SHOWN_CHARS + 1)
        if end < 0:
            return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS]
    if end + 1 == len(text):
        return text
    return text[:end + 1] + ("" if text.isspace() else ".")


def build(doc: Document, others: list[Document], events: list[EditEvent], row: int, col: int,
          max_chars: int, cache: DefinitionCache) -> str:
    """The extra segment for a cursor: definitions, then recent edits (nearest the prefix, where
    the shipped models saw them in training), within `max_chars`."""
    history = finished_history(events, row)
    near = names_near(doc, row, col)
    found: list[tuple[str, int, str, str]] = []  # (uri, row, name, rendered)
    for other in sorted(others, key=lambda d: d.uri):
        for name, d in definitions(other, cache).items():
            if name in near:
                found.append((other.uri, d.row, name, prompt.render_definition(_path(other.uri), d.text)))
    if found:  # a name this document defines itself needs no other file's definition
        own = definitions(doc, cache)
        found = [f for f in found if f[2] not in own]
    found.sort()
    defs = "".join(f[3] for f in found[:MAX_DEFS])
    if len(defs) + len(history) > max_chars:  # whole pieces only, so the text stays stable
        history = "" if len(history) > max_chars // 2 else history
        pieces, total = [], len(history)
        for *_, text in found[:MAX_DEFS]:
            if total + len(text) > max_chars:
                break
            pieces.append(text)
            total += len(text)
        defs = "".join(pieces)
    return defs + history


def _path(uri: str) -> str:
    return uri.split("://", 1)[-1]
