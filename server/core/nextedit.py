"""Next-edit candidates: after an edit, the matching edits it implies elsewhere in the file.

From the newest edit event and the lines as they were before it, `intent` finds what the
user did as a token substitution (old -> new, common tokens trimmed) or a token insertion.
`proposals` turns it into candidate edits, bounded in number, nearest first:
  * an identifier replaced: its other occurrences as identifiers (tree-sitter), within the
    function that holds the edit, or the whole file for a top-level name;
  * a parameter appended to a function's signature: the same text appended to the
    argument lists of that function's calls;
  * a literal or other token run replaced: lines of the same shape holding the same run.
Each proposal is a whole line as it is and as it would be, plus the small edit between them
(trimmed at token boundaries, so a rename shows as the new name). Lines the event itself
touched are never proposed (nothing the user just typed is undone); the model then judges
each proposal against the line as it is (inference.judge_edits).

Pure text and tree logic: knows nothing of LSP, requests or the engine.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from .document import Document, body
from .history import EditEvent
from .languages import walk

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d[\w.]*|\"[^\"\n]*\"|'[^'\n]*'|\S")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
LITERAL = re.compile(r"\d[\w.]*\Z|\"[^\"\n]*\"\Z|'[^'\n]*'\Z")
MAX_PROPOSALS = 8  # each costs one judging pass (~12 ms on a 2-core CPU)
SHAPE_RATIO = 0.8  # token-shape similarity for "lines like the edited one" (literals alike)
SCOPES = ("function_definition", "function_declaration", "method_definition", "method_declaration",
          "function_item", "arrow_function", "lambda", "class_definition")


@dataclass(frozen=True)
class Intent:
    kind: str  # "replace" | "append_param"
    old: str  # replaced text ("" for an insertion)
    new: str
    row: int  # row of the edit in the current text
    col: int  # its column
    first_row: int  # rows the event touched, current text
    last_row: int
    name: str = ""  # append_param: the function's name
    after_dot: bool = False  # the replaced identifier was an attribute (x.old)


@dataclass(frozen=True)
class LineEdit:
    row: int
    start: int  # character range on the row that `text` replaces
    end: int
    text: str
    original: str  # the line body as it is
    proposed: str  # the line body after the edit


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def candidates(before: list[str], doc: Document, event: EditEvent) -> list[LineEdit]:
    """The rules' half of next-edit suggestions: the edits the newest edit `event` implies,
    `before` being the lines as they were when it began (the model then judges them:
    inference.judge_edits). Every front end comes through here."""
    found = intent(before, doc, event.first_line, min(event.last_line, len(doc.lines) - 1))
    return proposals(found, doc) if found is not None else []


def intent(before: list[str], doc: Document, first_row: int, last_row: int) -> Intent | None:
    """The substitution the newest event made: `before` holds the document's lines as they
    were when it began, rows first_row..last_row of `doc` are what it touched now."""
    old_last = last_row + (len(before) - len(doc.lines))
    if first_row >= len(doc.lines) or old_last < first_row - 1:
        return None
    old_text = "".join(before[first_row:old_last + 1])
    new_text = "".join(doc.lines[first_row:last_row + 1])
    a, b = _tokens(old_text), _tokens(new_text)
    ops = [op for op in difflib.SequenceMatcher(a=[t[0] for t in a], b=[t[0] for t in b],
                                               autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1:
        return None
    tag, i1, i2, j1, j2 = ops[0]
    old = old_text[a[i1][1]:a[i2 - 1][2]] if i2 > i1 else ""
    new = new_text[b[j1][1]:b[j2 - 1][2]] if j2 > j1 else ""
    at = b[j1][1] if j2 > j1 else (b[j1][1] if j1 < len(b) else len(new_text))
    row = first_row + new_text[:at].count("\n")
    col = at - (new_text.rfind("\n", 0, at) + 1)
    if tag == "replace" and old and new:
        return Intent("replace", old, new, row, col, first_row, last_row, after_dot=new_text[at - 1:at] == ".")
    if tag == "insert" and new.startswith(",") and j2 < len(b) and b[j2][0] == ")":
        name = _def_name(doc, row)
        if name:
            return Intent("append_param", "", new, row, col, first_row, last_row, name)
    return None


def _def_name(doc: Document, row: int) -> str:
    """Name of the function whose signature is on `row` (tree-sitter), else ''."""
    if doc.tree is None:
        return ""
    line = doc.lines[row]
    node = doc.tree.root_node.named_descendant_for_point_range((row, len(line) - len(line.lstrip())),
                                                                (row, len(line.encode()) - 1))
    while node is not None and not node.type.endswith(("function_definition", "function_declaration",
                                                         "function_item", "method_declaration")):
        node = node.parent
    if node is None or node.start_point[0] != row:
        return ""
    name = node.child_by_field_name("name")
    return name.text.decode() if name is not None and name.text else ""


def proposals(intent: Intent, doc: Document, limit: int = MAX_PROPOSALS) -> list[LineEdit]:
    if intent.kind == "append_param":
        found = _call_sites(intent, doc)
    elif IDENT.match(intent.old) and IDENT.match(intent.new) and doc.tree is not None:
        found = _identifier_sites(intent, doc)
    else:
        found = _same_shape_sites(intent, doc)
    by_row: dict[int, list[tuple[int, int, str]]] = {}
    for row, start, end, text in found:
        if not intent.first_row <= row <= intent.last_row:  # never what the user just typed
            by_row.setdefault(row, []).append((start, end, text))
    out = []
    for row in sorted(by_row, key=lambda r: (abs(r - intent.row), r))[:limit]:
        original = body(doc.lines[row])
        proposed, shift = original, 0
        for start, end, text in sorted(by_row[row]):
            proposed = proposed[:start + shift] + text + proposed[end + shift:]
            shift += len(text) - (end - start)
        s, e, t = small_edit(original, proposed)
        out.append(LineEdit(row, s, e, t, original, proposed))
    return out


def small_edit(original: str, proposed: str) -> tuple[int, int, str]:
    """(start, end, text): the part of `original` that changes, widened to whole tokens."""
    a, b = _tokens(original), _tokens(proposed)
    i = 0
    while i < min(len(a), len(b)) and a[i][0] == b[i][0] and a[i][1] == b[i][1]:
        i += 1
    j = 0
    while (j < min(len(a), len(b)) - i and a[-1 - j][0] == b[-1 - j][0]
           and len(original) - a[-1 - j][1] == len(proposed) - b[-1 - j][1]):
        j += 1
    start = a[i][1] if i < len(a) else len(original)
    end = a[len(a) - j - 1][2] if len(a) - j > i else start
    bstart = b[i][1] if i < len(b) else len(proposed)
    bend = b[len(b) - j - 1][2] if len(b) - j > i else bstart
    if len(a) - j <= i:  # pure insertion: anchor at the next token of the original
        start = end = a[i][1] if i < len(a) else len(original)
        bend = bstart + (len(proposed) - len(original))
    return start, end, proposed[bstart:bend]


def _scope(doc: Document, row: int, col: int):
    """The function (or class) holding the edit when it is inside one, else the whole tree."""
    bcol = len(body(doc.lines[row])[:col].encode())
    node = doc.tree.root_node.named_descendant_for_point_range((row, bcol), (row, bcol))
    while node is not None and node.type not in SCOPES:
        node = node.parent
    return node if node is not None else doc.tree.root_node


def _identifier_sites(intent: Intent, doc: Document):
    scope = _scope(doc, intent.row, intent.col)
    if scope.type != "module" and scope.start_point[0] == intent.row and _def_name(doc, intent.row) == intent.new:
        scope = doc.tree.root_node  # the function itself was renamed: its callers are anywhere
    old = intent.old.encode()
    for node in walk(scope):
        if node.type in ("identifier", "field_identifier", "property_identifier", "type_identifier") \
                and node.text == old:
            row, bcol = node.start_point
            line, col = doc.lines[row], doc.char_col(row, bcol)
            keyword = node.parent is not None and node.parent.type == "keyword_argument" \
                and node.parent.child_by_field_name("name") == node  # f(old=...) names the callee's parameter
            if (line[col - 1:col] == ".") == intent.after_dot and not keyword:  # a local is not an attribute
                yield row, col, col + len(intent.old), intent.new


def _call_sites(intent: Intent, doc: Document):
    if doc.tree is None:
        return
    for node in walk(doc.tree.root_node):
        if node.type not in ("call", "call_expression"):
            continue
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None or fn.text is None:
            continue
        name = fn.text.decode("utf-8", "replace").rsplit(".", 1)[-1]
        if name != intent.name or args.start_point[0] != args.end_point[0]:
            continue  # one-line argument lists only: the edit stays on one row
        row, bcol = args.end_point
        col = doc.char_col(row, bcol - 1)  # before ")"
        empty = args.named_child_count == 0
        text = intent.new.lstrip(", ") if empty else intent.new
        yield row, col, col, text


def _shape(tokens: list[str]) -> list[str]:
    return ["L" if LITERAL.match(t) else t for t in tokens]


def _same_shape_sites(intent: Intent, doc: Document):
    edited = _shape([t[0] for t in _tokens(body(doc.lines[intent.row]))])
    old_tokens = [t[0] for t in _tokens(intent.old)]
    for row in range(len(doc.lines)):
        line = body(doc.lines[row])
        if intent.old not in line:
            continue
        toks = _tokens(line)
        words = [t[0] for t in toks]
        if difflib.SequenceMatcher(a=edited, b=_shape(words), autojunk=False).ratio() < SHAPE_RATIO:
            continue
        n = len(old_tokens)
        for k in range(len(words) - n + 1):
            if words[k:k + n] == old_tokens:
                yield row, toks[k][1], toks[k + n - 1][2], intent.new
