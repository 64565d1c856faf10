"""Extra context: what the model sees ahead of the prefix besides the document itself.

Two parts, rendered by the engine's prompt format (engine/prompt.py, which training uses too):
  * recent edits of this document, oldest first, as a `<|history|>` block — only finished
    events: the one still growing at the cursor would change the text on every keystroke;
  * definitions from other open documents of names used near the cursor, each as
    `<|file_sep|>path` and the definition's first lines.

The extra segment comes first in the sequence, so any change to it costs the whole
context's keys/values: everything here is chosen to stay the same while the user types
(sorted, built from whole definitions, recomputed per document version and cached).

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
DEF_LINES = 4  # lines of a definition shown
MAX_DEFS = 6
MAX_DOC_BYTES = 1 << 20  # other documents larger than this are not scanned


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
    if doc.size_bytes <= MAX_DOC_BYTES:
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
    lines = [doc.line_body(r) for r in range(max(0, row - NEAR_LINES), row)]
    lines.append(doc.line_body(row)[:col])
    return set(NAME.findall("\n".join(lines)))


def finished_history(events: list[EditEvent], cursor_row: int) -> str:
    """Finished edit events, for completions: the one still being typed at the cursor would
    change the extra segment on every keystroke."""
    done = list(events)
    if done and done[-1].first_line - 8 <= cursor_row <= done[-1].last_line + 8:
        done = done[:-1]  # still being typed
    return edit_history(done)


def edit_history(events: list[EditEvent]) -> str:
    """Edit events, oldest first, in the engine's prompt format."""
    return prompt.render_history([(ev.removed, ev.inserted) for ev in events])


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
