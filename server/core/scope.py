"""The names in scope at a cursor, and the names a text uses that are not.

A draft copied from a neighbouring function keeps that function's names: after
`def _build_value_for_mapping(mapping, data, config):` a line copied from
`_build_value_for_union(union, data, config)` still says `union`. `scope_at` collects, from the
document's tree, what a name at the cursor may refer to:

- the language's built-ins (bindings.BUILTINS);
- every name the file binds at its top level (definitions, assignments, imports), wherever
  they stand, but not what functions and classes bind inside themselves;
- in the top-level statement that holds the cursor (a function, a class), every name bound or
  used before the cursor, nested functions that do not hold it left out: its parameters and
  locals (`locals`), and names it uses that come from elsewhere (another file of a Go package, a
  glob import). An unfinished line often breaks the parse of the whole statement (one ERROR
  node): that statement is then parsed again alone, its brackets closed at the cursor.

`unknown` then parses a text (a draft, a model's answer) after the text before the cursor and
returns the names it uses that are neither in scope nor bound by the text itself (`for key,
value in` binds key and value). Attributes (`x.attr`), keyword arguments and path segments are
not names in scope and are never checked (bindings.py); neither are types. A name the caller
finds the file using freely elsewhere (`standing`: GLOBAL, a name from outside the file) counts
as in scope too.

A file whose scope is `open` may use names it does not bind: Go's package spans files, a glob
import (`from x import *`, `use x::*`) brings in names nobody listed. There a name the file never
mentions counts as in scope, unless the caller knows it as another function's own (`bound_in`).

Bounded: the statement holding the cursor is read up to it, each pass visits at most
NODE_BUDGET nodes (a file read only in part is `open`), a name's places in the file at most
_OCCURRENCES. It knows nothing of drafts, models or LSP: documents and text in, names out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .bindings import BIND, BUILTINS, RULES, SKIP, USE, VALUE_FIELDS, Rules, names
from .document import Document
from .languages import Syntax, enclosing_blocks, new_parser

HEAD_LINES = 60  # lines above the cursor a text is parsed after (at most)
NODE_BUDGET = 40_000  # nodes visited per pass
_OCCURRENCES = 32  # places of a name read when asking how the file knows it (`standing`)


@dataclass(frozen=True)
class Scope:
    """What a name at a cursor may refer to."""

    language: str
    names: frozenset[str]
    params: tuple[tuple[str, str], ...]  # (name, type) of the parameters of the function at the cursor, in order
    open: bool  # the file may use names it does not bind (Go, glob imports, a scope read in part)
    head_row: int  # a row at or above the cursor where a parse of the text before it may start
    # Of `names`, the cursor's own: the parameters, and what its statement binds before it.
    locals: frozenset[str] = frozenset()


def _reader(lines) -> Callable[[int], bytes]:
    cache: dict[int, bytes] = {}

    def line(row: int) -> bytes:
        b = cache.get(row)
        if b is None:
            b = cache[row] = lines[row].encode("utf-8", "replace") if 0 <= row < len(lines) else b""
        return b
    return line


def _indent(text: str) -> int:
    return len(text.expandtabs(4)) - len(text.expandtabs(4).lstrip(" "))


def holds(node, offset: int, row: int, lines, indent_blocks: bool) -> bool:
    """Whether `node` holds the cursor at byte `offset` (row `row`): it spans it, or (where
    indentation closes blocks) the cursor sits on a line indented deeper than the node's first
    line, with nothing less indented between the node's end and the cursor."""
    if node.start_byte < offset <= node.end_byte:
        return True
    if not indent_blocks or node.start_byte >= offset:
        return False
    start = node.start_point[0]
    base = _indent(lines[start])
    cursor_line = lines[row] if row < len(lines) else ""
    if cursor_line.strip() and _indent(cursor_line) <= base:
        return False
    if not cursor_line.strip() and row < len(lines) and _indent(cursor_line.rstrip("\r\n")) <= base:
        return False
    for r in range(node.end_point[0] + 1, row):
        if lines[r].strip() and _indent(lines[r]) <= base:
            return False
    return True


def scope_at(doc: Document, row: int, col: int) -> Scope | None:
    """The names in scope at (row, col) of `doc`, from its tree; None without rules or a tree."""
    rules = RULES.get(doc.syntax.name)
    tree = doc.tree
    if rules is None or tree is None:
        return None
    key = (doc.uri, doc.version, row, col, id(tree))
    if _last[0] == key:
        return _last[1]
    scope = _compute(doc, rules, row, col)
    _last[:] = [key, scope]
    return scope


_last: list = [None, None]  # the last scope computed (a snapshot and its drafts ask for the same)


def _compute(doc: Document, rules: Rules, row: int, col: int) -> Scope:
    lines, lang = doc.lines, doc.syntax.name
    line = _reader(lines)
    offset, _ = doc.byte_point(row, col)
    blocks = doc.syntax.indent_blocks
    root = doc.tree.root_node
    found = set(BUILTINS.get(lang, ()))
    region = _region(root, offset, row, lines, blocks)
    bound: set[str] = set()  # what the statement holding the cursor binds before it
    # 1. What the file binds at its top level.
    found |= _top_level(doc.uri, root, region, rules, line, row)
    # 2. Before the cursor in the statement that holds it. An unfinished line often breaks the
    # parse of all of it (an ERROR node where functions are no longer told apart): then that
    # statement alone is parsed again, its open brackets closed at the cursor.
    if region is not None and region.has_error:
        params = _statement_again(doc, rules, row, col, found, bound)
    else:
        params = _before(region, rules, line, offset, row, lines, blocks, found, bound)
    if lang == "go":
        found |= _go_packages(root, line)
    open_ = lang == "go" or _globbed(root, region, line) or _TOP[doc.uri][1]
    local = frozenset(bound | {name for name, _ in params})
    return Scope(lang, frozenset(found), params, open_, _head_row(root, offset, row, region), local)


# Per document, what each top-level statement binds, by a key of its text (`_top_level`), and
# whether the last pass ran out of budget: a keystroke changes one statement, and only it is read
# again. A key is the statement's type, its first lines and (for one that is not a function or a
# class, whose bindings lie anywhere inside) its length.
_TOP: dict[str, tuple[dict, bool]] = {}
_TOP_DOCUMENTS = 16  # documents whose statements are kept


def _top_level(uri: str, root, region, rules: Rules, line, row: int) -> set[str]:
    """What the file binds at its top level: what each statement binds outside the functions and
    classes in it, or their names; of the statement holding the cursor, its name (what it binds
    before the cursor is `_before`'s); definitions inside a statement the parse broke (an ERROR
    node) read as text."""
    old, _ = _TOP.get(uri, ({}, False))
    new: dict = {}
    found: set[str] = set()
    budget = [NODE_BUDGET]

    def enter(node) -> bool:
        budget[0] -= 1
        return node.type not in rules.scopes
    for child in root.children:
        if not child.is_named:
            continue
        if region is not None and child == region:
            found |= _own_names(child, rules, line)
            if child.has_error:  # an unfinished line may swallow the definitions below it
                found |= _defined_in_rows(line, row + 1, child.end_point[0])
            continue
        first = child.start_point[0]
        scoped = child.type in rules.scopes
        key = (child.type, line(first), line(first + 1) if child.end_point[0] > first else b"",
               None if scoped else child.end_byte - child.start_byte)
        got = old.get(key)
        if got is None:
            if scoped:
                got = _own_names(child, rules, line)
            else:
                got = frozenset(n.text for n in names(child, rules, line, enter=enter, budget=max(budget[0], 0),
                                                      skip_fields=VALUE_FIELDS) if n.role == BIND)
            if child.type == "ERROR":  # definitions a broken parse no longer shows as such
                got |= _defined_in_rows(line, first, child.end_point[0])
        new[key] = got
        found |= got
    if len(_TOP) >= _TOP_DOCUMENTS and uri not in _TOP:
        _TOP.pop(next(iter(_TOP)))
    _TOP[uri] = (new, budget[0] <= 0)
    return found


def _own_names(node, rules: Rules, line) -> frozenset[str]:
    """The name a definition binds (a function's, a class's; through wrappers such as a
    decorator or an export)."""
    for _ in range(3):
        name = node.child_by_field_name("name")
        if name is not None:
            return frozenset({_text(name, line)}) if name.type in rules.names else frozenset()
        inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
        if inner is None:
            return frozenset()
        node = inner
    return frozenset()


def _holding(node, offset: int, row: int, lines, blocks: bool):
    """The named child of `node` that holds the cursor (`holds`), or None. A tree cursor finds
    the child at the cursor, so a node of many children costs two of them."""
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(max(offset - 1, 0)) is None:
        tries = [node.child(node.child_count - 1)]
    else:
        child = cursor.node
        tries = [child, child.prev_sibling]
    for c in tries:
        while c is not None and not c.is_named:
            c = c.prev_sibling
        if c is not None and c.start_byte < offset and holds(c, offset, row, lines, blocks):
            return c
    return None


def _region(root, offset: int, row: int, lines, blocks: bool):
    """The top-level statement that holds the cursor (the last one before it, where indentation
    says the cursor is still inside it)."""
    return _holding(root, offset, row, lines, blocks) if root.child_count else None


def _chain(region, offset: int, row: int, lines, blocks: bool) -> list:
    """`region` and the nodes below it that hold the cursor, outermost first."""
    out, node = [], region
    while node is not None:
        out.append(node)
        node = _holding(node, offset, row, lines, blocks) if node.child_count else None
    return out


# Scopes whose names are not bare names inside the functions they hold (a method's siblings).
_CLASSES = frozenset({"class_definition", "class_declaration", "class", "class_body", "abstract_class_declaration",
                      "impl_item", "trait_item"})


def _before(region, rules: Rules, line, offset: int, row: int, lines, blocks: bool,
            found: set[str], bound: set[str]) -> tuple[tuple[str, str], ...]:
    """Adds to `found` every name bound or used before the cursor in the outermost function
    holding it (in `region` itself where none does), nested functions that do not hold it left
    out, and the items of the modules around it; to `bound` those bound. Returns the parameters
    of the innermost function holding the cursor."""
    if region is None:
        return ()
    chain = _chain(region, offset, row, lines, blocks)
    fns = [n for n in chain if n.type in rules.functions]
    top = fns[0] if fns else region

    def enter(node) -> bool:
        return node.type not in rules.scopes or holds(node, offset, row, lines, blocks)
    for n in names(top, rules, line, end=offset, enter=enter, budget=NODE_BUDGET):
        if n.role != SKIP:
            found.add(n.text)
        if n.role == BIND:
            bound.add(n.text)
    # The items of the modules (and the body of a class the cursor is directly in) around it.
    for node in chain[:chain.index(top) + 1] if fns else chain[:1]:
        if node.type in rules.scopes and node.type not in rules.functions and (not fns or node.type not in _CLASSES):
            for n in names(node, rules, line, enter=lambda nd: nd.type not in rules.scopes, budget=NODE_BUDGET,
                           skip_fields=VALUE_FIELDS):
                if n.role == BIND:
                    found.add(n.text)
    return _params(fns[-1] if fns else None, rules, line)


STATEMENT_LINES = 2000  # lines above the cursor a broken statement is parsed again from, at most
_OPEN = {"(": ")", "[": "]", "{": "}"}


_HEADER = re.compile(r"\s*(?:(?:pub(?:\([^)]*\))?|export|default|async|static|private|public|protected|unsafe)\s+)*"
                     r"(?:def|func|fn|function)\b|.*=>\s*\{?\s*$")
_NOT_A_START = ("}", ")", "]", "#", "//", "/*", "*", "@")


def _statement_again(doc: Document, rules: Rules, row: int, col: int, found: set[str],
                     bound: set[str]) -> tuple[tuple[str, str], ...]:
    """`_before` over a fresh parse of the function holding the cursor, as its lines say: from
    the nearest header above it (each line less indented than the last one taken, up to one
    that opens a function, or one at column 0) to the cursor, with the brackets still open
    there closed."""
    lines = doc.lines
    start, limit = row, _indent(lines[row]) if lines[row].strip() else 1 << 30
    for r in range(row - 1, max(-1, row - STATEMENT_LINES), -1):
        text = lines[r]
        if not text.strip() or text.lstrip().startswith(_NOT_A_START) or _indent(text) >= limit:
            continue
        start, limit = r, _indent(text)
        if limit == 0 or _HEADER.match(text):
            break
    head = "".join(lines[start:row]) + lines[row][:col]
    stack = []
    for ch in head:
        if ch in _OPEN:
            stack.append(_OPEN[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
    lead = _lead(doc.syntax, head)  # (a method's `def` is indented)
    window = (lead + head + "".join(reversed(stack)) + "\n").split("\n")
    window = [w + "\n" for w in window[:-1]]
    tree = new_parser(doc.syntax.grammar).parse("".join(window).encode("utf-8", "replace"))
    offset = len((lead + head).encode("utf-8", "replace"))
    at = row - start + lead.count("\n")
    blocks = doc.syntax.indent_blocks
    region = _region(tree.root_node, offset, at, window, blocks)
    while region is not None and region.type == "if_statement" and lead:  # into the `if 1:` lead
        inner = region.child_by_field_name("consequence")
        region = None if inner is None else _region(inner, offset, at, window, blocks)
    return _before(region, rules, _reader(window), offset, at, window, blocks, found, bound)


_GO_IMPORT = re.compile(rb'^\s*(?:import\s+)?(?:[\w.]+\s+)?"([^"]+)"')


def _go_packages(root, line) -> set[str]:
    """The names Go imports without an alias bind: a package is named after its path's last
    element, as a rule (`gopkg.in/yaml.v3` -> yaml, `github.com/x/go-y` -> y or go_y, `x/v2` -> x)."""
    out: set[str] = set()
    for node in root.children:
        if node.type != "import_declaration":
            continue
        for r in range(node.start_point[0], node.end_point[0] + 1):
            m = _GO_IMPORT.match(line(r))
            if m is None:
                continue
            parts = m.group(1).decode("utf-8", "replace").split("/")
            last = parts[-1]
            if re.fullmatch(r"v\d+", last) and len(parts) > 1:
                last = parts[-2]
            last = last.split(".")[0]
            out |= {last, last.replace("-", "_"), last.split("-")[-1], last.removeprefix("go-")}
    return out


_DEFINITION = re.compile(rb"(?:export\s+)?(?:default\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|unsafe\s+)*"
                         rb"(?:def|class|func|fn|function|struct|enum|trait|type|const|let|var|static|mod|interface)"
                         rb"\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)|([A-Za-z_]\w*)\s*(?::[^=]*)?=[^=]")


def _defined_in_rows(line, first: int, last: int) -> set[str]:
    """Names that lines first..last define at column 0, read as text."""
    out = set()
    for r in range(first, last + 1):
        m = _DEFINITION.match(line(r))
        if m is not None:
            out.add((m.group(1) or m.group(2)).decode("utf-8", "replace"))
    return out


def _params(fn, rules: Rules, line) -> tuple[tuple[str, str], ...]:
    """(name, type as written, "" when none) of each parameter of `fn`, in order."""
    if fn is None:
        return ()
    ps = fn.child_by_field_name("parameters") or fn.child_by_field_name("parameter")
    if ps is None:
        return ()
    if ps.type in rules.names:
        return ((_text(ps, line), ""),)
    out = []
    for n in names(ps, rules, line):
        if n.role != BIND:
            continue
        node = n.node
        while node.parent is not None and node.parent != ps:
            node = node.parent
        kind = node.child_by_field_name("type") if node != n.node else None
        out.append((n.text, "" if kind is None else _text(kind, line)))
    return tuple(out)


def _text(node, line) -> str:
    (r, c), (er, ec) = node.start_point, node.end_point
    return line(r)[c:ec if er == r else None].decode("utf-8", "replace")


_GLOB = re.compile(rb"\bimport\s+\*|::\s*\*|^\s*import\s+\.\s+\"")


def _globbed(root, region, line) -> bool:
    """Whether a glob import stands at the top level or in the cursor's statement's own items."""
    nodes = list(root.children)
    if region is not None:
        body = region.child_by_field_name("body")
        nodes += list(body.children) if body is not None else []
    for node in nodes:
        if node.type in ("import_from_statement", "import_declaration") or node.type.startswith("use"):
            for r in range(node.start_point[0], node.end_point[0] + 1):
                if _GLOB.search(line(r)):
                    return True
    return False


def _head_row(root, offset: int, row: int, region) -> int:
    """The start row of the outermost node holding the cursor that starts within HEAD_LINES."""
    node = root.named_descendant_for_byte_range(max(offset - 1, 0), offset)
    best = row
    while node is not None and node != root:
        r = node.start_point[0]
        if row - HEAD_LINES <= r <= row:
            best = min(best, r)
        node = node.parent
    if region is not None and row - HEAD_LINES <= region.start_point[0] <= row:
        best = min(best, region.start_point[0])
    return best


def params_at(doc: Document, row: int, col: int) -> tuple[tuple[str, str], ...]:
    """(name, type) of the parameters, in order, of the function holding (row, col) of `doc`
    (() outside one)."""
    rules = RULES.get(doc.syntax.name)
    if rules is None or doc.tree is None:
        return ()
    offset, _ = doc.byte_point(row, col)
    lines, blocks = doc.lines, doc.syntax.indent_blocks
    region = _region(doc.tree.root_node, offset, row, lines, blocks)
    fns = [] if region is None else [n for n in _chain(region, offset, row, lines, blocks) if n.type in rules.functions]
    return _params(fns[-1] if fns else None, rules, _reader(lines))


GLOBAL, LOCAL, ABSENT = "global", "local", "absent"


def standing(doc: Document, name: str) -> str:
    """How `doc` knows `name`, which is not in scope at the cursor: GLOBAL where some use of it
    is free (at the top level, or in functions none of which binds it: it comes from outside
    the file, as a Go package's or a glob import's names do), LOCAL where only functions bind it
    (another function's own), ABSENT where it does not occur. Reads the first _OCCURRENCES
    places the name occurs."""
    rules = RULES.get(doc.syntax.name)
    if rules is None or doc.tree is None:
        return ABSENT
    word = re.compile(rf"(?<![\w$]){re.escape(name)}(?![\w$])")
    root, seen = doc.tree.root_node, 0
    line = _reader(doc.lines)
    uses: list[list[int]] = []  # per use, the ids of the functions around it
    binders: set[int] = set()  # functions that bind the name (a parameter, a local)
    for r, text in enumerate(doc.lines):
        if name not in text:
            continue
        for m in word.finditer(text):
            seen += 1
            if seen > _OCCURRENCES:
                break
            b = len(line(r)) - len(text[m.start():].encode("utf-8", "replace"))
            offset = doc.byte_point(r, 0)[0] + b
            role = next((n.role for n in names(root, rules, line, start=offset, end=offset + 1)), SKIP)
            if role == SKIP:
                continue
            fns, scoped, node = [], False, root.named_descendant_for_byte_range(offset, offset + 1)
            while node is not None:
                if node.type in rules.functions:
                    fns.append(node.id)
                scoped = scoped or node.type in rules.scopes
                node = node.parent
            if role == BIND and not scoped:
                return GLOBAL  # defined at the top level after all (a definition just typed)
            if role == BIND:
                binders.add(fns[0] if fns else -1)  # (-1: a class's own, no bare name anywhere)
            elif role == USE:
                uses.append(fns)
        if seen > _OCCURRENCES:
            break
    # A closure's use of a name its outer function binds is that function's local.
    if any(not binders.intersection(fns) for fns in uses):
        return GLOBAL
    return LOCAL if binders else ABSENT


def bound_in(syntax: Syntax, text: str, name: str) -> bool:
    """Whether `text` (a few lines of another document, around where a draft was copied from)
    binds `name` inside a function: as a parameter, or on an indented line (a local; the lines
    may begin inside a function whose header they do not show)."""
    rules = RULES.get(syntax.name)
    if rules is None or syntax.grammar is None or name not in text:
        return False
    source = text.encode("utf-8", "replace")
    rows = source.split(b"\n")
    tree = new_parser(syntax.grammar).parse(source)
    for n in names(tree.root_node, rules, lambda r: rows[r] if r < len(rows) else b"", budget=NODE_BUDGET):
        if n.role != BIND or n.text != name:
            continue
        row = n.node.start_point[0]
        if rows[row][:1] in (b" ", b"\t"):
            return True
        node = n.node.parent
        while node is not None and node.type not in rules.functions:
            node = node.parent
        if node is not None:
            return True
    return False


def imported_in(syntax: Syntax, text: str) -> set[str]:
    """The names the imports in `text` (the head of another document) bind."""
    rules = RULES.get(syntax.name)
    if rules is None or syntax.grammar is None:
        return set()
    source = text.encode("utf-8", "replace")
    rows = source.split(b"\n")
    line = lambda r: rows[r] if r < len(rows) else b""  # noqa: E731
    root = new_parser(syntax.grammar).parse(source).root_node
    found = _go_packages(root, line) if syntax.name == "go" else set()
    for child in root.children:
        if "import" in child.type or child.type == "use_declaration":
            found |= {n.text for n in names(child, rules, line) if n.role == BIND}
    return found


# -- the names a text uses -------------------------------------------------------------------

@dataclass(frozen=True)
class Used:
    """The names a text uses (`uses`, in order, each once) and binds (`bound`)."""

    uses: tuple[str, ...]
    bound: frozenset[str]


def used(syntax: Syntax, head: str, text: str) -> Used | None:
    """The names `text` uses and binds when it follows `head` (the text before the cursor, from
    a statement's start); None for a language without rules."""
    rules = RULES.get(syntax.name)
    if rules is None or syntax.grammar is None:
        return None
    lead = _lead(syntax, head)
    source = (lead + head + text + "\n").encode("utf-8", "replace")
    start = len((lead + head).encode("utf-8", "replace"))
    end = start + len(text.encode("utf-8", "replace"))
    tree = new_parser(syntax.grammar).parse(source)
    rows = source.split(b"\n")
    uses: dict[str, None] = {}
    bound = set()
    for n in names(tree.root_node, rules, lambda r: rows[r] if r < len(rows) else b"", start=start, end=end):
        if n.role == USE:
            uses.setdefault(n.text)
        elif n.role == BIND:
            bound.add(n.text)
    return Used(tuple(uses), frozenset(bound))


def _lead(syntax: Syntax, head: str) -> str:
    """Python: `if 1:` lines that let a head starting on an indented line parse as in its file."""
    if syntax.name != "python":
        return ""
    return enclosing_blocks(head + "\n")


def unknown(scope: Scope, syntax: Syntax, head: str, text: str, allowed: frozenset[str] = frozenset(),
            known: Callable[[str], str] | None = None) -> tuple[str, ...]:
    """The names `text` uses that are neither in `scope` (nor `allowed`) nor bound by the text.
    `known(name)` says how the file knows a name (`standing`): one it uses freely counts as in
    scope, and in an open scope one it never mentions too (without `known`, every name not in
    scope counts)."""
    found = used(syntax, head, text)
    if found is None:
        return ()
    out = []
    for name in found.uses:
        if name in scope.names or name in allowed or name in found.bound:
            continue
        how = known(name) if known is not None else LOCAL
        if how == GLOBAL or (how == ABSENT and scope.open):
            continue
        out.append(name)
    return tuple(out)


def head_text(lines, first: int, scope: Scope, row: int, col: int) -> str:
    """The text from the scope's head row to the cursor, from `lines` (document rows first..)."""
    top = max(scope.head_row, first)
    at = row - first
    return "".join(lines[top - first:at]) + lines[at][:col]
