"""Where an edit recurs: the places in a document that the user's change implies.

Each finder takes the change (`intents.Intent`) and the document as it is now, and yields
(row, start, end, text) replacements in characters, nearest the edit first where the search
is bounded by a count:
  * identifier_sites: the other uses of a renamed name, in the scope that binds it;
  * call_sites: the one-line calls of a function whose signature gained a parameter;
  * same_shape_sites: lines shaped like the edited one holding a replaced literal;
  * requote_sites: other string literals, when the user only changed a string's quotes;
  * change_sites: any other token-level change (a deletion, an insertion, a run of tokens
    replaced) wherever the removed tokens recur between matching neighbours inside the same
    kind of syntax node — `class A(object):` -> `class A:` reaches the other classes, not
    `def f(object):`, a string or a comment.

Every search is bounded (rows each side, lines read, comparisons made): this runs on the
event loop after the typing pauses.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from .document import Document, body
from .intents import Intent
from .languages import new_parser, walk_rows

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d[\w.]*|\"[^\"\n]*\"|'[^'\n]*'|\S")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
LITERAL = re.compile(r"\d[\w.]*\Z|\"[^\"\n]*\"\Z|'[^'\n]*'\Z")
# Renames and call sites lie within this many rows of the edit: walking a row's tree nodes
# costs ~10 us.
SITE_ROWS = 2000
# A rename is offered whole or not at all: renaming 8 of 30 uses leaves the code broken. One
# whose uses reach past SITE_ROWS, or with more than this many rows to change, is not offered.
MAX_RENAME_ROWS = 256
# Lines are searched nearest first until enough are found: the substring test costs ~0.1 us
# a row, the comparison of a row holding the old text ~20 us, so both are capped (~2 ms and
# ~40 ms at worst, after the typing pauses; a far site of a repeated literal is still found.
# 500 comparisons instead of 2,000 lost held-out literal recall, 0.813 -> 0.799).
LITERAL_ROWS = 20_000
MAX_SHAPE_CHECKS = 2000
MAX_LINE_CHARS = 2000  # longer lines (minified, data) are never compared
SHAPE_RATIO = 0.8  # token-shape similarity for "lines like the edited one" (literals alike)
# A change with more rows than this to follow is not offered at all (a set above
# MAX_PROPOSALS is offered whole: see nextedit.proposals).
MAX_CHANGE_ROWS = 64
SCOPES = ("function_definition", "function_declaration", "method_definition", "method_declaration",
          "function_item", "arrow_function", "lambda", "class_definition")
NAME_NODES = ("identifier", "field_identifier", "property_identifier", "type_identifier")
IMPORTS = ("import_statement", "import_from_statement", "future_import_statement")
# Python: where an identifier binds a name (a parameter, an assignment's target, ...); the
# patterns in between are see-through (`a, b = ...`).
BINDS_ANY = ("parameters", "lambda_parameters", "global_statement", "nonlocal_statement") + IMPORTS
BINDS_FIELD = {"typed_parameter": None, "default_parameter": "name", "typed_default_parameter": "name",
               "assignment": "left", "augmented_assignment": "left", "for_statement": "left",
               "for_in_clause": "left", "as_pattern": "alias"}
COMPREHENSIONS = ("list_comprehension", "set_comprehension", "dictionary_comprehension", "generator_expression")
SEE_THROUGH = ("pattern_list", "tuple_pattern", "list_pattern", "list_splat_pattern", "dictionary_splat_pattern",
               "as_pattern_target")

def tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def nearest_rows(row: int, total: int, reach: int):
    """row, row - 1, row + 1, row - 2, ... within `reach` rows and the document."""
    yield row
    for d in range(1, reach + 1):
        if row - d < 0 and row + d >= total:
            return
        if row - d >= 0:
            yield row - d
        if row + d < total:
            yield row + d


# -- renames ------------------------------------------------------------------------------

def identifier_sites(intent: Intent, doc: Document) -> list[tuple[int, int, int, str]]:
    """Every other use of the renamed name in the scope that binds it; none when that scope
    reaches past the rows searched (a rename is offered whole or not at all)."""
    scope = _rename_scope(intent, doc)
    first, last = intent.row - SITE_ROWS, intent.row + SITE_ROWS
    if scope.start_point[0] < first or scope.end_point[0] > last:
        doc.note_limit("rename", f"a rename in a scope over {SITE_ROWS} rows from the edit: not offered")
        return []
    edited = _node_at(doc, intent.row, intent.col)
    in_import = _inside(edited, IMPORTS)
    old = intent.old.encode()
    nodes = [n for n in walk_rows(scope, first, last) if n.type in NAME_NODES and n.text == old]
    # `version = Version(version)` -> `parsed = Version(version)`: a name bound again takes
    # the new name from there on; its earlier binding and uses keep the old one.
    rebound = doc.syntax.name == "python" and _is_binding(edited) and any(
        n.start_point < edited.start_point and _is_binding(n) and not _inside(n, COMPREHENSIONS) for n in nodes)
    sites = []
    for node in nodes:
        if rebound and node.start_point < edited.start_point:
            continue
        row, bcol = node.start_point
        line, col = doc.lines[row], doc.char_col(row, bcol)
        keyword = node.parent is not None and node.parent.type == "keyword_argument" \
            and node.parent.child_by_field_name("name") == node  # f(old=...) names the callee's parameter
        if (line[col - 1:col] == ".") != intent.after_dot or keyword:  # a local is not an attribute
            continue
        if not in_import and _inside(node, IMPORTS):  # a use renamed leaves the import to the user
            continue
        sites.append((row, col, col + len(intent.old), intent.new))
    return sites


def _rename_scope(intent: Intent, doc: Document):
    """The function holding the edit when the name is its own (a parameter or a local, or the
    edit renamed a binding there); the whole file for a renamed function, and in Python for
    a name the function only uses (an import, a global: `List` -> `list` in one annotation)."""
    scope = _scope(doc, intent.row, intent.col)
    if scope.type == "module" or scope.type not in SCOPES:
        return scope
    if scope.start_point[0] == intent.row and def_name(doc, intent.row) == intent.new:
        return doc.tree.root_node  # the function itself was renamed: its callers are anywhere
    if doc.syntax.name != "python":
        return scope
    edited = _node_at(doc, intent.row, intent.col)
    if _is_binding(edited) or _binds(scope, intent.old.encode(), intent.row):
        return scope
    return doc.tree.root_node


def _binds(scope, name: bytes, row: int) -> bool:
    """Whether `scope` binds `name` itself (read within SITE_ROWS of `row`, as the sites are)."""
    return any(node.type == "identifier" and node.text == name and _is_binding(node)
               for node in walk_rows(scope, row - SITE_ROWS, row + SITE_ROWS))


def _is_binding(node) -> bool:
    """Whether this Python identifier is a name being bound, not a use (nor an annotation)."""
    child, parent = node, node.parent if node is not None else None
    while parent is not None:
        if parent.type in BINDS_ANY:
            return True
        if parent.type in BINDS_FIELD:
            field = BINDS_FIELD[parent.type]
            if field is None:  # typed_parameter: anything but its type
                return child != parent.child_by_field_name("type")
            return child == parent.child_by_field_name(field)
        if parent.type not in SEE_THROUGH:
            return False
        child, parent = parent, parent.parent
    return False


def _inside(node, types: tuple[str, ...]) -> bool:
    while node is not None:
        if node.type in types:
            return True
        node = node.parent
    return False


def _node_at(doc: Document, row: int, col: int):
    if doc.tree is None:
        return None
    bcol = len(body(doc.lines[row])[:col].encode())
    return doc.tree.root_node.named_descendant_for_point_range((row, bcol), (row, bcol))


def _scope(doc: Document, row: int, col: int):
    """The function (or class) holding the edit when it is inside one, else the whole tree."""
    node = _node_at(doc, row, col)
    while node is not None and node.type not in SCOPES:
        node = node.parent
    return node if node is not None else doc.tree.root_node


def def_name(doc: Document, row: int) -> str:
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


# -- appended parameters ------------------------------------------------------------------

def call_sites(intent: Intent, doc: Document):
    if doc.tree is None:
        return
    for node in walk_rows(doc.tree.root_node, intent.row - SITE_ROWS, intent.row + SITE_ROWS):
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


# -- literals -----------------------------------------------------------------------------

def _shape(words: list[str]) -> list[str]:
    return ["L" if LITERAL.match(t) else t for t in words]


def same_shape_sites(intent: Intent, doc: Document, limit: int):
    """Rows holding the replaced run on a line shaped like the edited one, nearest first,
    until `limit` rows are found (see LITERAL_ROWS and MAX_SHAPE_CHECKS)."""
    line = body(doc.lines[intent.row])
    if len(line) > MAX_LINE_CHARS:
        return
    edited = _shape([t[0] for t in tokens(line)])
    old_tokens = [t[0] for t in tokens(intent.old)]
    n = len(old_tokens)
    found = checks = 0
    for row in nearest_rows(intent.row, len(doc.lines), LITERAL_ROWS):
        text = doc.lines[row]
        if intent.old not in text or len(text) > MAX_LINE_CHARS + 2:
            continue
        if checks == MAX_SHAPE_CHECKS or found == limit:
            return
        checks += 1
        toks = tokens(body(text))
        words = [t[0] for t in toks]
        if difflib.SequenceMatcher(a=edited, b=_shape(words), autojunk=False).ratio() < SHAPE_RATIO:
            continue
        hits = [k for k in range(len(words) - n + 1) if words[k:k + n] == old_tokens]
        found += bool(hits) and not intent.first_row <= row <= intent.last_row
        for k in hits:
            yield row, toks[k][1], toks[k + n - 1][2], intent.new


TRIPLES = ("'''", '"""')


def requoted(old: str, new: str) -> str:
    """The quote `old` is rewritten with when `new` is the same string in the other quote
    ('x' -> "x", a docstring's three single quotes -> three double quotes, or one of its ends
    alone), else ""."""
    for was, now in ((TRIPLES[0], TRIPLES[1]), (TRIPLES[1], TRIPLES[0]), ("'", '"'), ('"', "'")):
        if old == was and new == now and len(was) == 3:
            return now
        n = len(was)
        inside = old[n:len(old) - n]
        if len(old) >= 2 * n and old[:n] == old[-n:] == was and new == now + inside + now \
                and now[0] not in inside and was[0] not in inside and "\n" not in inside:
            return now
    return ""


STRING_NODES = ("string", "string_start", "string_content", "string_end")


def requote_sites(intent: Intent, doc: Document, limit: int):
    """Other one-line string literals in the old quote that read the same in the new one (no
    quote of the new kind or backslash inside, not part of a triple quote), on code rows
    nearest first until `limit` rows: the quote style the user just chose, applied nearby."""
    quote = requoted(intent.old, intent.new)
    was = intent.old[:len(quote)]
    found = checks = 0
    for row in nearest_rows(intent.row, len(doc.lines), LITERAL_ROWS):
        text = doc.lines[row]
        if was not in text or len(text) > MAX_LINE_CHARS + 2 or intent.first_row <= row <= intent.last_row:
            continue
        if checks == MAX_SHAPE_CHECKS or found == limit:
            return
        checks += 1
        line = body(text)
        hits = list(_triples(doc, row, line, was, quote)) if len(quote) == 3 else []
        for word, start, end in tokens(line) if len(quote) == 1 else ():
            if word[0] != was or len(word) < 2 or word[-1] != was or quote in word or "\\" in word:
                continue
            if line[start - 1:start] == was or line[end:end + 1] == was:
                continue  # part of a triple quote
            if doc.tree is not None and _span_type(doc, row, start, end) not in STRING_NODES:
                continue  # inside a comment, or not a string of this language
            hits.append((row, start, end, quote + word[1:-1] + quote))
        found += bool(hits)
        yield from hits


def _triples(doc: Document, row: int, line: str, was: str, quote: str):
    """Each triple quote `was` on the line that opens or closes a string (not one inside a
    string), as `quote`; none on a line that holds `quote` already (a string holding both
    would end early)."""
    if quote in line:
        return
    at = line.find(was)
    while at >= 0:
        if doc.tree is None or _span_type(doc, row, at, at + 3) in ("string_start", "string_end"):
            yield row, at, at + 3, quote
        at = line.find(was, at + 3)


# -- any other token-level change ------------------------------------------------------------

def _kind(token: str) -> str:
    """What a neighbour must match: any name for a name, any literal for a literal, any of
    `, ) ] }` for one of them (an element's end: `f(a, x=1)` and `f(a, x=1, y=2)` alike),
    else the token itself."""
    if IDENT.match(token):
        return "name"
    if LITERAL.match(token):
        return "literal"
    return "end" if token in (",", ")", "]", "}") else token


def change_sites(intent: Intent, doc: Document) -> list[tuple[int, int, int, str]]:
    """The same change where it applies again: the removed tokens between neighbours of the
    same kind, or for an insertion (which has nothing else to anchor it) between the same two
    tokens and not there already, inside the same kind of syntax node as the edit. A change
    of punctuation alone is not followed. Up to MAX_CHANGE_ROWS + 1 rows, nearest first."""
    left, right = _kind(intent.left), _kind(intent.right)
    if intent.old:
        anchor = [t[0] for t in tokens(intent.old)]
        specific = anchor + [t[0] for t in tokens(intent.new)]
    elif intent.left and intent.right:  # between the same two tokens
        anchor = [intent.left]
        specific = anchor + [intent.right]
        inserted = [t[0] for t in tokens(intent.new)]
    else:
        return []
    if not any(_kind(w) in ("name", "literal") for w in specific):
        return []  # punctuation alone (a comma added, brackets) says nothing about where else
    node_type = intent.context if doc.tree is not None else ""
    needle = intent.old or intent.left
    n, sites, rows, checks = len(anchor), [], set(), 0
    for row in nearest_rows(intent.row, len(doc.lines), LITERAL_ROWS):
        text = doc.lines[row]
        if needle not in text or len(text) > MAX_LINE_CHARS + 2:
            continue
        if checks == MAX_SHAPE_CHECKS or len(rows) > MAX_CHANGE_ROWS:
            break
        checks += 1
        toks = tokens(body(text))
        words = [t[0] for t in toks]
        for k in range(len(words) - n + 1):
            if words[k:k + n] != anchor:
                continue
            if intent.old:
                if (_kind(words[k - 1]) if k else "") != left \
                        or (_kind(words[k + n]) if k + n < len(words) else "") != right:
                    continue
                before, after = k - 1, k + n  # the neighbours, -1 / len(words) at the line's ends
            elif k + 1 == len(words) or not _same_next(words[k + 1], intent.right, doc.tree is not None) \
                    or inserted in (words[k + 1:k + 1 + len(inserted)], words[max(0, k + 1 - len(inserted)):k + 1]):
                continue  # not before the same token, or there already (`f(a=a)` takes no second `=a`)
            else:
                before, after = k, k + 1
            first = toks[max(before, 0)][1]
            last = toks[min(after, len(toks) - 1)][2]
            if node_type and _span_type(doc, row, first, last) != node_type:
                continue
            if intent.left and intent.right and 0 <= before and after < len(toks):
                sites.append(_spaced(intent, row, toks, before, after, body(text)))
            else:
                sites.append((row, toks[k][1], toks[k + n - 1][2], intent.new))
            rows.add(row)
    return sites


def _spaced(intent: Intent, row: int, toks, before: int, after: int, line: str) -> tuple[int, int, str, str]:
    """The change between two neighbours, spaced as the user spaced it: their gap, and when the
    user's insertion ends in a space before the right neighbour, the space after it too
    (`timeout=None` -> `timeout: float = None`, not `timeout: float =None`)."""
    start, end = toks[before][2], toks[after][1]
    if intent.old or not intent.gap[-1:].isspace() or toks[after][0] != intent.right:
        return row, start, end, intent.gap
    stop = toks[after][2]
    space = line[stop:len(line) - len(line[stop:].lstrip(" \t"))]
    if space == intent.right_space:
        return row, start, end, intent.gap
    return row, start, stop + len(space), intent.gap + intent.right + intent.right_space


def _same_next(token: str, want: str, typed: bool) -> bool:
    """The token after an insertion point: the same one, or with a tree any of `, ) ] }` for
    one of them (`def f(a)` and `def f(a, b)` take the same annotation of `a`)."""
    return token == want or (typed and _kind(token) == _kind(want) == "end")


def _span_type(doc: Document, row: int, start: int, end: int) -> str:
    """Type of the smallest named node covering characters start..end of `row`."""
    return _covering(doc.tree, body(doc.lines[row]), row, start, end)


def _covering(tree, line: str, row: int, start: int, end: int) -> str:
    a, b = len(line[:start].encode()), len(line[:end].encode())
    node = tree.root_node.named_descendant_for_point_range((row, a), (row, b))
    return node.type if node is not None else ""


def context_type(grammar, lines: Sequence[str], row: int, start: int, end: int, parsed: dict | None = None) -> str:
    """The same for `lines` as they were before an edit (a `Before` window, at most a few
    thousand lines: parsed once per edit event the change rule follows, a few milliseconds;
    `parsed`, when given, keeps the tree for the event's other token runs), so the user's site
    and the sites not yet changed are compared as the same text."""
    if not 0 <= row < len(lines):
        return ""
    parsed = {} if parsed is None else parsed
    if "tree" not in parsed:
        parsed["tree"] = new_parser(grammar).parse("".join(lines).encode("utf-8", "surrogatepass"))
    return _covering(parsed["tree"], body(lines[row]), row, start, end)
