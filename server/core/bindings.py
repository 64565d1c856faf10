"""What a name in a tree-sitter tree does: binds a name, uses one, or neither.

A copied draft is only worth showing where its names exist (scope.py). That needs, per
language, which identifier nodes bind a name (parameters, assignment targets, loop variables,
imports, definitions), which use one, and which are neither (an attribute after `.`, a keyword
argument's name, a path segment after `::`, a macro's name). Each language's rules are a few
tables over (parent node type, field) pairs, read bottom-up from the identifier:

- SKIP: the name belongs to something else (`x.attr`, `f(key=...)`, `a::b`): no use, no binding.
- BIND: the name is bound here (`def f(x)`, `x = ...`, `for x in`).
- PASS: a pattern that passes its role on to its parent (`a, (b, c) = ...`).
Anything else is a use. A few textual rules back the tables up where the parse is broken (an
unfinished line is often an ERROR node) or flat (a Rust macro's token tree): a name right after
`.` or `::`, or before `::` or a Rust `!`, is no use.

Also the names every file of a language sees without defining them (`BUILTINS`), and the node
types that open a scope of their own (`SCOPES`): the names bound inside a function are not seen
outside it.

It knows nothing of documents, drafts or models: trees and bytes in, names out.
"""

from __future__ import annotations

import builtins
import keyword
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import tree_sitter

BIND, USE, SKIP = "bind", "use", "skip"


@dataclass(frozen=True)
class Rules:
    """One language's tables (see the module's docstring)."""

    names: frozenset[str]  # node types that are names
    bind: frozenset[tuple[str, str | None]]  # (parent type, field): a name bound there
    passes: frozenset[tuple[str, str | None]]  # (parent type, field): a pattern passing its role up
    skip: frozenset[tuple[str, str | None]]  # (parent type, field): neither a use nor a binding
    bind_inside: frozenset[str]  # every name below these binds (imports)
    skip_inside: frozenset[str]  # no name below these counts (attributes, macro definitions)
    scopes: frozenset[str]  # node types whose body is a scope of its own
    functions: frozenset[str]  # of those, the ones with parameters
    macros: bool = False  # `name!` is a macro (Rust)


def _pairs(*items: str) -> frozenset[tuple[str, str | None]]:
    """"parent.field" (or "parent" for an unnamed child) -> (parent, field)."""
    out = set()
    for item in items:
        parent, _, field = item.partition(".")
        out.add((parent, field or None))
    return frozenset(out)


PYTHON = Rules(
    names=frozenset({"identifier"}),
    bind=_pairs("function_definition.name", "class_definition.name", "parameters", "lambda_parameters",
                "default_parameter.name", "typed_default_parameter.name", "assignment.left", "for_statement.left",
                "for_in_clause.left", "named_expression.name", "as_pattern.alias", "global_statement",
                "nonlocal_statement", "import_statement.name", "import_from_statement.name", "aliased_import.alias",
                "type_alias_statement.left"),
    passes=_pairs("pattern_list", "tuple_pattern", "list_pattern", "typed_parameter", "list_splat_pattern",
                  "dictionary_splat_pattern", "as_pattern_target", "tuple", "list", "parenthesized_expression"),
    skip=_pairs("attribute.attribute", "keyword_argument.name", "import_from_statement.module_name",
                "aliased_import.name", "relative_import", "keyword_pattern", "class_pattern"),
    bind_inside=frozenset(),
    skip_inside=frozenset({"future_import_statement"}),
    scopes=frozenset({"function_definition", "lambda", "class_definition"}),
    functions=frozenset({"function_definition", "lambda"}),
)

_TS_BIND = ("variable_declarator.name", "required_parameter.pattern", "optional_parameter.pattern",
            "arrow_function.parameter", "for_in_statement.left", "catch_clause.parameter", "function_declaration.name",
            "function_expression.name", "function.name", "generator_function_declaration.name",
            "generator_function.name", "class_declaration.name", "class.name", "abstract_class_declaration.name",
            "interface_declaration.name", "type_alias_declaration.name", "enum_declaration.name",
            "internal_module.name", "module.name", "formal_parameters", "function_signature.name")
TYPESCRIPT = Rules(
    names=frozenset({"identifier", "shorthand_property_identifier", "shorthand_property_identifier_pattern",
                     "type_identifier"}),
    bind=_pairs(*_TS_BIND),
    passes=_pairs("object_pattern", "array_pattern", "pair_pattern.value", "rest_pattern", "assignment_pattern.left",
                  "object_assignment_pattern.left"),
    skip=_pairs("jsx_opening_element.name", "jsx_closing_element.name", "jsx_self_closing_element.name",
                "nested_identifier", "member_expression.property", "labeled_statement.label",
                "break_statement.label", "continue_statement.label", "jsx_attribute", "nested_type_identifier",
                "generic_type.name", "type_annotation", "type_arguments", "predefined_type"),
    bind_inside=frozenset({"import_statement", "import_clause"}),
    skip_inside=frozenset({"export_clause"}),
    scopes=frozenset({"function_declaration", "function_expression", "function", "arrow_function", "method_definition",
                      "generator_function_declaration", "generator_function", "class_declaration", "class",
                      "abstract_class_declaration", "class_body"}),
    functions=frozenset({"function_declaration", "function_expression", "function", "arrow_function",
                         "method_definition", "generator_function_declaration", "generator_function"}),
)

GO = Rules(
    names=frozenset({"identifier", "package_identifier", "type_identifier"}),
    bind=_pairs("short_var_declaration.left", "var_spec.name", "const_spec.name", "parameter_declaration.name",
                "variadic_parameter_declaration.name", "range_clause.left", "function_declaration.name",
                "type_spec.name", "type_alias.name", "import_spec.name", "type_switch_statement.alias",
                "receive_statement.left", "type_parameter_declaration.name"),
    passes=_pairs("expression_list"),
    skip=_pairs("keyed_element.key", "labeled_statement.label", "package_clause", "selector_expression.field",
                "method_declaration.name", "method_elem.name", "field_declaration.name"),
    bind_inside=frozenset(),
    skip_inside=frozenset(),
    scopes=frozenset({"function_declaration", "method_declaration", "func_literal"}),
    functions=frozenset({"function_declaration", "method_declaration", "func_literal"}),
)

RUST = Rules(
    names=frozenset({"identifier", "shorthand_field_identifier", "type_identifier"}),
    bind=_pairs("let_declaration.pattern", "parameter.pattern", "closure_parameters", "for_expression.pattern",
                "let_condition.pattern", "match_arm.pattern", "function_item.name", "function_signature_item.name",
                "const_item.name", "static_item.name", "struct_item.name", "enum_item.name", "union_item.name",
                "mod_item.name", "trait_item.name", "type_item.name", "macro_definition.name", "field_pattern.name",
                "extern_crate_declaration.name", "extern_crate_declaration.alias"),
    passes=_pairs("tuple_pattern", "tuple_struct_pattern", "struct_pattern", "field_pattern.pattern", "ref_pattern",
                  "mut_pattern", "captured_pattern", "slice_pattern", "or_pattern", "match_pattern",
                  "reference_pattern"),
    skip=_pairs("scoped_identifier.path", "scoped_identifier.name", "scoped_type_identifier.path",
                "scoped_type_identifier.name", "macro_invocation.macro", "tuple_struct_pattern.type",
                "struct_pattern.type", "lifetime", "label", "field_expression.field", "enum_variant.name",
                "generic_type_with_turbofish.type"),
    bind_inside=frozenset({"use_declaration"}),
    skip_inside=frozenset({"attribute_item", "inner_attribute_item", "macro_definition", "lifetime", "label"}),
    scopes=frozenset({"function_item", "closure_expression", "impl_item", "trait_item", "mod_item"}),
    functions=frozenset({"function_item", "closure_expression"}),
    macros=True,
)

RULES = {"python": PYTHON, "typescript": TYPESCRIPT, "typescriptreact": TYPESCRIPT, "javascript": TYPESCRIPT,
         "javascriptreact": TYPESCRIPT, "go": GO, "rust": RUST}

# Names a language's files see without defining or importing them.
_JS_GLOBALS = """
undefined NaN Infinity globalThis console Object Array String Number Boolean Symbol BigInt Math JSON Date RegExp
Error TypeError RangeError SyntaxError ReferenceError EvalError URIError AggregateError Promise Map Set WeakMap
WeakSet WeakRef FinalizationRegistry Proxy Reflect ArrayBuffer SharedArrayBuffer DataView Int8Array Uint8Array
Uint8ClampedArray Int16Array Uint16Array Int32Array Uint32Array Float32Array Float64Array BigInt64Array
BigUint64Array Function Intl Atomics WebAssembly parseInt parseFloat isNaN isFinite encodeURIComponent
decodeURIComponent encodeURI decodeURI escape unescape eval setTimeout clearTimeout setInterval clearInterval
setImmediate clearImmediate queueMicrotask structuredClone fetch Request Response Headers FormData Blob File URL
URLSearchParams TextEncoder TextDecoder AbortController AbortSignal Event EventTarget CustomEvent window self
document navigator location history localStorage sessionStorage performance crypto atob btoa alert confirm prompt
requestAnimationFrame cancelAnimationFrame getComputedStyle HTMLElement Element Node process require module
exports __dirname __filename Buffer global arguments describe it test expect beforeEach afterEach beforeAll afterAll
jest vi suite setup teardown suiteSetup suiteTeardown async await of get set let static yield as from type keyof
readonly declare namespace infer is asserts satisfies accessor override any unknown never object string number
boolean symbol bigint void null true false this super new typeof instanceof in delete Partial Required Readonly
Record Pick Omit Exclude Extract NonNullable ReturnType Parameters InstanceType Awaited PromiseLike ArrayLike
Iterable Iterator AsyncIterable AsyncIterator IterableIterator Generator AsyncGenerator ThisType Uppercase Lowercase
PropertyKey TemplateStringsArray NodeJS Thenable
"""
_GO_BUILTINS = """
true false nil iota append cap clear close complex copy delete imag len make max min new panic print println real
recover bool byte complex64 complex128 error float32 float64 int int8 int16 int32 int64 rune string uint uint8 uint16
uint32 uint64 uintptr any comparable _
"""
_RUST_BUILTINS = """
Some None Ok Err Option Result Vec String Box ToString ToOwned Clone Copy Send Sync Sized Unpin Drop Fn FnMut FnOnce
From Into TryFrom TryInto Iterator IntoIterator Extend Default Eq PartialEq Ord PartialOrd AsRef AsMut
DoubleEndedIterator ExactSizeIterator FromIterator Debug Hash std core alloc crate self Self super i8 i16 i32 i64 i128
isize u8 u16 u32 u64 u128 usize f32 f64 bool char str _ drop
"""
_PYTHON_MORE = {"self", "cls", "__file__", "__name__", "__doc__", "__class__", "__path__", "__all__", "__annotations__",
                "__dict__", "__module__", "__qualname__", "__builtins__", "match", "case", "type", "_"}
BUILTINS: dict[str, frozenset[str]] = {
    "python": frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(_PYTHON_MORE),
    "typescript": frozenset(_JS_GLOBALS.split()),
    "go": frozenset(_GO_BUILTINS.split()),
    "rust": frozenset(_RUST_BUILTINS.split()),
}
for _alias in ("typescriptreact", "javascript", "javascriptreact"):
    BUILTINS[_alias] = BUILTINS["typescript"]


@dataclass(frozen=True)
class Name:
    """A name in a tree: its text, what it does, where it starts (byte offset) and its node."""

    text: str
    role: str  # BIND | USE | SKIP
    start: int
    end: int
    node: tree_sitter.Node


def role_of(rules: Rules, path: tuple[tuple[str, str | None], ...]) -> str:
    """The role of the name at the end of `path`: (node type, field it hangs from) pairs from the
    root down to the name itself."""
    types = [t for t, _ in path]
    if any(t in rules.skip_inside for t in types[:-1]):
        return SKIP
    if any(t in rules.bind_inside for t in types[:-1]):
        return BIND
    i = len(path) - 1
    if i > 0 and types[i - 1] == "dotted_name":  # Python: `a.b.c` in an import binds `a` only
        if path[i][1] != FIRST:
            return SKIP
        i -= 1
    if i > 0 and types[i - 1] == "literal_element":  # Go: a composite literal's key is a field name
        i -= 1
    if i > 0 and ((types[i - 1], path[i][1]) in rules.skip or (types[i - 1], None) in rules.skip):
        return SKIP
    while i > 0:
        parent, field = types[i - 1], path[i][1]
        if (parent, field) in rules.bind:
            return BIND
        if (parent, field) not in rules.passes:
            return USE
        i -= 1
    return USE


FIRST = "<first>"  # the field the walker gives a dotted name's first part


# Fields below which no name is bound at the top level of a file (values, conditions, calls):
# a pass that wants only the file's own bindings does not read them.
VALUE_FIELDS = frozenset({"right", "value", "arguments", "argument", "function", "condition", "object",
                          "type", "return_type", "superclasses", "decorator", "subscript", "operand",
                          "result", "body_expression"})


def names(root: tree_sitter.Node, rules: Rules, line: Callable[[int], bytes], *, start: int = 0,
          end: int | None = None, enter: Callable[[tree_sitter.Node], bool] | None = None,
          budget: int = 1 << 30, skip_fields: frozenset[str] = frozenset()) -> Iterator[Name]:
    """The names below `root` that start within bytes start..end, with their roles, in document
    order. `line(row)` gives a row's bytes (for the textual rules). A node for which `enter` says
    False is not descended into (its own `name` field is still reported, as a binding), nor is
    a child hanging from one of `skip_fields`. At most `budget` nodes are visited."""
    stop = end if end is not None else 1 << 62
    stack = [(root, ((root.type, None),))]
    while stack and budget > 0:
        node, path = stack.pop()
        budget -= 1
        if node.type in rules.names:
            if start <= node.start_byte < stop:
                yield _named(rules, node, path, line)
            continue
        if enter is not None and node is not root and not enter(node):
            name = node.child_by_field_name("name")
            if name is not None and name.type in rules.names and start <= name.start_byte < stop:
                yield _named(rules, name, path + ((name.type, "name"),), line)
            continue
        stack.extend(reversed([(child, path + ((child.type, field),))
                               for child, field in _children(node, start, stop) if field not in skip_fields]))


def _children(node: tree_sitter.Node, start: int, stop: int) -> list[tuple[tree_sitter.Node, str | None]]:
    """(child, field) of the children of `node` that reach into bytes start..stop, in order; a
    tree cursor skips to the first of them, so a node of many children costs only those."""
    cursor = node.walk()
    if start > node.start_byte:
        i = cursor.goto_first_child_for_byte(start)
        if i is None:
            return []
    elif cursor.goto_first_child():
        i = 0
    else:
        return []
    out = []
    while True:
        child = cursor.node
        if child.start_byte >= stop:
            break
        if child.end_byte > start:
            field = cursor.field_name
            if field is None and node.type == "dotted_name":
                field = FIRST if i == 0 else None
            out.append((child, field))
        if not cursor.goto_next_sibling():
            break
        i += 1
    return out


def _named(rules: Rules, node: tree_sitter.Node, path: tuple[tuple[str, str | None], ...],
           line: Callable[[int], bytes]) -> Name:
    row, col = node.start_point
    erow, ecol = node.end_point
    text = line(row)[col:ecol if erow == row else None].decode("utf-8", "replace")
    role = role_of(rules, path)
    if role == USE and node.type == "type_identifier":  # types are checked nowhere: only their definitions count
        role = SKIP
    if role != SKIP and _textually_skipped(rules, line, node):
        role = SKIP
    return Name(text, role, node.start_byte, node.end_byte, node)


def _textually_skipped(rules: Rules, line: Callable[[int], bytes], node: tree_sitter.Node) -> bool:
    """A name after `.` or `::`, or before `::` (a path's head), or a Rust macro's name."""
    row, col = node.start_point
    erow, ecol = node.end_point
    before = line(row)[:col].rstrip()
    if before.endswith(b".") and not before.endswith(b".."):
        return True
    if before.endswith(b"::"):
        return True
    after = line(erow)[ecol:].lstrip()
    return after.startswith(b"::") or (rules.macros and after.startswith(b"!") and not after.startswith(b"!="))
