"""Which tree-sitter grammar parses a document, and what its syntax looks like to the server.

Maps LSP language ids (and, when a client sends an id we do not know, file extensions) to
grammars from the per-language `tree-sitter-<lang>` wheels, which ship compiled parsers:
nothing is downloaded at run time. Also names, per language, the characters that open a
block and the node types that mean "inside a comment", "inside a string" or "inside an
argument list". A language without a grammar gets `None` and the server falls back to
plain-text contexts.

It knows nothing of documents, positions, models or LSP messages.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from importlib import import_module
from typing import Callable, Iterator

import tree_sitter

log = logging.getLogger(__name__)

# language id -> (module, function returning the grammar pointer)
_GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "javascriptreact": ("tree_sitter_javascript", "language"),  # the JS grammar parses JSX
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
    "java": ("tree_sitter_java", "language"),
}
_ALIASES = {"py": "python", "js": "javascript", "jsx": "javascriptreact", "ts": "typescript",
            "tsx": "typescriptreact", "golang": "go", "rs": "rust", "c++": "cpp", "cc": "cpp", "cxx": "cpp",
            "h": "c", "hpp": "cpp"}
_EXTENSIONS = {".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
               ".cjs": "javascript", ".jsx": "javascriptreact", ".ts": "typescript", ".mts": "typescript",
               ".tsx": "typescriptreact", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c", ".cc": "cpp",
               ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".java": "java"}

COMMENT_TYPES = frozenset({"comment", "line_comment", "block_comment"})
STRING_TYPES = frozenset({"string", "string_content", "string_fragment", "template_string", "string_literal",
                          "raw_string_literal", "raw_string_literal_content", "interpreted_string_literal",
                          "interpreted_string_literal_content", "multiline_string_fragment", "char_literal",
                          "character_literal", "text_block"})
# Code inside a string (f-string fields, template substitutions): a cursor there is not in text.
FIELD_TYPES = frozenset({"interpolation", "template_substitution"})
ARGUMENT_TYPES = frozenset({"argument_list", "arguments", "parameters", "formal_parameters", "parameter_list",
                            "type_arguments", "call_expression_arguments"})
OPEN_CLOSE = {"(": ")", "[": "]", "{": "}"}
CLOSERS = frozenset(")]}")
QUOTES = frozenset("\"'`")
# Languages where a backtick delimits a string (template literals, Go's raw strings); elsewhere
# it is text (reStructuredText's ``code`` in Python docstrings).
BACKTICK_STRINGS = frozenset({"javascript", "javascriptreact", "typescript", "typescriptreact", "go"})


@dataclass(frozen=True)
class Syntax:
    """What the context builder and post-processing need to know of one language."""

    name: str  # canonical language id, "plaintext" when unknown
    grammar: tree_sitter.Language | None
    block_openers: tuple[str, ...]  # a line ending in one of these opens a block body
    indent_blocks: bool  # the block ends where indentation drops (Python), else at the closing brace


PLAIN = Syntax("plaintext", None, (":", "{"), True)


def canonical(language_id: str | None, uri: str = "") -> str | None:
    """The known language id for a client's id, else guessed from the URI's extension."""
    lid = (language_id or "").strip().lower()
    lid = _ALIASES.get(lid, lid)
    if lid in _GRAMMARS:
        return lid
    path = uri.rsplit("/", 1)[-1].lower()
    dot = path.rfind(".")
    return _EXTENSIONS.get(path[dot:]) if dot >= 0 else None


@lru_cache(maxsize=None)
def _load(name: str) -> tree_sitter.Language | None:
    module, fn = _GRAMMARS[name]
    try:
        return tree_sitter.Language(getattr(import_module(module), fn)())
    except Exception as e:  # a missing or ABI-incompatible wheel: plain text, logged once
        log.warning("grammar for %s unavailable (%s): plain-text contexts", name, e)
        return None


def syntax_for(language_id: str | None, uri: str = "") -> Syntax:
    name = canonical(language_id, uri)
    if name is None:
        return PLAIN
    grammar = _load(name)
    if grammar is None:
        return PLAIN
    if name == "python":
        return Syntax(name, grammar, (":",), True)
    return Syntax(name, grammar, ("{",), False)


def supported() -> list[str]:
    return sorted(_GRAMMARS)


def new_parser(grammar: tree_sitter.Language) -> tree_sitter.Parser:
    """A fresh parser: parsers are not thread-safe, so each thread makes its own."""
    return tree_sitter.Parser(grammar)


def walk(node: tree_sitter.Node, enter: Callable[[tree_sitter.Node], bool] | None = None
         ) -> Iterator[tree_sitter.Node]:
    """`node` and every node below it, depth first (last child first: a plain stack, no
    recursion, so deep trees are fine); a child for which `enter` is false is skipped with
    its subtree."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children if enter is None else (c for c in n.children if enter(c)))


def children_in_rows(node: tree_sitter.Node, first: int = 0, last: int | None = None
                     ) -> Iterator[tree_sitter.Node]:
    """The children of `node` that reach into rows first..last, in order. A tree cursor skips
    to the first of them, so a module of many statements costs only those in the rows."""
    cursor = node.walk()
    if cursor.goto_first_child_for_point((max(first, 0), 0)) is None:
        return
    while True:
        child = cursor.node
        if last is not None and child.start_point[0] > last:
            return
        yield child
        if not cursor.goto_next_sibling():
            return


def walk_rows(node: tree_sitter.Node, first: int, last: int) -> Iterator[tree_sitter.Node]:
    """`node` and every node below it that reaches into rows first..last, depth first: `walk`
    bounded to a window of rows, whatever the size of the tree."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(list(children_in_rows(n, first, last))))


def count_errors(tree: tree_sitter.Tree) -> int:
    """ERROR plus MISSING nodes, visiting only subtrees that contain an error."""
    return sum(1 for node in walk(tree.root_node, lambda c: c.has_error or c.is_missing)
               if node.is_error or node.is_missing)


def enclosing_blocks(window: str) -> str:
    """Python: `if 1:` lines, one per indentation width below the window's first line's, that
    make a window cut at an indented statement parse as it does in its file. Without them
    tree-sitter reads the indented first line as an error and much of what follows with it, so
    whether a completion added errors was noise (a right `-> None:` rejected, 10 errors before,
    11 after). Windows indented with tabs are left as they are."""
    lines = [ln for ln in window.split("\n") if ln.strip()]
    if not lines or "\t" in lines[0][:len(lines[0]) - len(lines[0].lstrip())]:
        return ""
    width = len(lines[0]) - len(lines[0].lstrip(" "))
    if width == 0:
        return ""
    widths = {len(ln) - len(ln.lstrip(" ")) for ln in lines} | {0}
    return "".join(" " * w + "if 1:\n" for w in sorted(widths) if w < width)
