"""`redraft eval next-edit`: scenarios made from real code, the server's next-edit path on each.

Each scenario is one edit a user makes at one place, and the places it implies:
  rename_param   a parameter renamed at its definition; its other uses in the function
  rename_local   a local renamed where it is first assigned; its other uses
  add_param      a parameter appended to a signature; the one-line calls in the file
  literal        one of three or more same-shape lines has its literal changed; the others
The edit is applied to the document, then intent -> proposals -> the model's judgement
(nextedit.candidates, inference.judge_edits) run as the server runs them, timed together. Edits are judged by
the document they produce: recall = target places that read as intended after applying all
edits / target places; precision = edits that turn a target place into the intended text /
all edits; reversal = edits that touch the user's own edit or put back the text it removed.

Deterministic: files sorted, one random.Random per (seed, kind).
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass

import numpy as np

from ..core.history import EditHistory
from ..core.inference import judge_edits
from ..core.refill import refill_edits, refill_row

from ..core import nextedit
from ..core.document import Document, body
from ..core.languages import syntax_for, walk
from .samples import Source

KINDS = ("rename_param", "rename_local", "add_param", "literal")
URI = "file:///redraft-eval/next_edit.py"


@dataclass(frozen=True)
class Scenario:
    kind: str
    file: int
    row: int  # the user's edit: (row, start..end) of the original text -> new text
    start: int
    end: int
    new: str
    targets: dict  # row -> the intended line body after all edits


def _doc(text: str) -> Document:
    return Document(URI, text, 1, "python", syntax_for("python", URI))


def _new_name(old: str) -> str:
    return old.rstrip("_") + "_value"


def _functions(doc: Document):
    return (node for node in walk(doc.tree.root_node) if node.type == "function_definition")


def _idents(node, name: bytes):
    for n in walk(node):
        if n.type == "identifier" and n.text == name and not (n.parent is not None and n.parent.type == "attribute"
                                                              and n.parent.child_by_field_name("attribute") == n):
            if n.parent is None or n.parent.type != "keyword_argument" or n.parent.child_by_field_name("name") != n:
                yield n


def _apply(doc: Document, sites: list[tuple[int, int, int, str]]) -> dict[int, str]:
    """Row -> line body with the (row, start, end, text) replacements applied."""
    out: dict[int, str] = {}
    for row, start, end, text in sorted(sites, reverse=True):
        line = out.get(row, body(doc.lines[row]))
        out[row] = line[:start] + text + line[end:]
    return out


def _rename(doc: Document, fn, site, name: str, fi: int, kind: str) -> Scenario | None:
    row = site.start_point[0]
    new = _new_name(name)
    uses = [(n.start_point[0], doc.char_col(*n.start_point)) for n in _idents(fn, name.encode())
            if n.start_point[0] != row]
    if not uses or site.start_point[0] != site.end_point[0]:
        return None
    targets = _apply(doc, [(r, c, c + len(name), new) for r, c in uses])
    col = doc.char_col(row, site.start_point[1])
    return Scenario(kind, fi, row, col, col + len(name), new, targets)


def _scenarios(source: Source, fi: int, kind: str) -> list[Scenario]:
    doc = _doc(source.text)
    if doc.tree is None:
        return []
    out = []
    if kind in ("rename_param", "rename_local", "add_param"):
        for fn in _functions(doc):
            params = fn.child_by_field_name("parameters")
            fname = fn.child_by_field_name("name")
            if params is None or fname is None:
                continue
            if kind == "rename_param":
                for p in params.named_children:
                    ident = p if p.type == "identifier" else (p.child_by_field_name("name") or
                                                              (p.named_children[0] if p.named_children else None))
                    if ident is not None and ident.type == "identifier" and ident.text not in (b"self", b"cls"):
                        s = _rename(doc, fn, ident, ident.text.decode(), fi, kind)
                        if s:
                            out.append(s)
            elif kind == "rename_local":
                seen = set()
                body_node = fn.child_by_field_name("body")
                for st in (body_node.named_children if body_node is not None else []):
                    if st.type == "expression_statement" and st.named_children and \
                            st.named_children[0].type == "assignment":
                        left = st.named_children[0].child_by_field_name("left")
                        if left is not None and left.type == "identifier" and left.text not in seen:
                            seen.add(left.text)
                            s = _rename(doc, fn, left, left.text.decode(), fi, kind)
                            if s:
                                out.append(s)
            else:
                s = _add_param(doc, fn, params, fname.text.decode(), fi)
                if s:
                    out.append(s)
    else:
        out.extend(_literal(doc, fi))
    return out


def _add_param(doc: Document, fn, params, name: str, fi: int) -> Scenario | None:
    if params.start_point[0] != params.end_point[0] or any(p.type != "identifier" for p in params.named_children):
        return None  # defaults, *args, annotations: the appended parameter would need more thought
    row, bcol = params.end_point
    col = doc.char_col(row, bcol - 1)
    new = ", extra" if params.named_child_count else "extra"
    targets = _apply(doc, [s for s in _calls(doc, name) if s[0] != row])
    return Scenario("add_param", fi, row, col, col, new, targets) if targets else None


def _calls(doc: Document, name: str):
    """Every call of `name` (also `x.name(...)`), multi-line ones included, as the insertion
    of `extra` before its closing parenthesis: the scenario's truth, kept apart from the
    server's rule (which only proposes one-line argument lists)."""
    for node in walk(doc.tree.root_node):
        fn, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        if node.type != "call" or fn is None or args is None or args.type != "argument_list":
            continue
        callee = fn.child_by_field_name("attribute") if fn.type == "attribute" else fn
        if callee is None or callee.text != name.encode():
            continue
        row, bcol = args.end_point
        col = doc.char_col(row, bcol - 1)
        yield row, col, col, ", extra" if args.named_child_count else "extra"


LITERAL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")


def _literal(doc: Document, fi: int) -> list[Scenario]:
    by_shape: dict[tuple[str, str], list[tuple[int, re.Match]]] = {}
    for r, line in enumerate(doc.lines):
        text = body(line)
        if text.lstrip().startswith("#"):
            continue
        for m in LITERAL.finditer(text):
            shape = (LITERAL.sub("L", text.strip()), m.group(1))
            by_shape.setdefault(shape, []).append((r, m))
    out = []
    for (_, value), sites in sorted(by_shape.items()):
        rows = sorted({r for r, _ in sites})
        if len(rows) < 3 or len(rows) != len(sites):
            continue
        new = str(int(float(value)) + 1) if "." not in value else value + "5"
        r0, m0 = sites[0]
        targets = {r: body(doc.lines[r])[:m.start(1)] + new + body(doc.lines[r])[m.end(1):] for r, m in sites[1:]}
        out.append(Scenario("literal", fi, r0, m0.start(1), m0.end(1), new, targets))
    return out


def draw(sources: list[Source], kind: str, n: int, seed: int) -> list[Scenario]:
    rng = random.Random(f"{seed}:{kind}")
    found = [s for fi, src in enumerate(sources) for s in _scenarios(src, fi, kind)]
    picked = rng.sample(found, min(n, len(found)))
    return sorted(picked, key=lambda s: (s.file, s.row, s.start))


@dataclass
class Result:
    scenario: Scenario
    edits: int
    right: int  # edits that turned a target place into its intended text
    recalled: int  # target places that read as intended afterwards
    reversals: int
    ms: float


def propose(engine, text: str, changes: list, margin: float, refill: bool = False
            ) -> tuple[Document, list[str], list, float]:
    """`text` opened as a document, the user's `changes` (LSP ranges, UTF-16 columns) applied
    and recorded as the session records them, then the server's next-edit path: the rules'
    candidates, the model's judgement, and with `refill` the model's rewrite of the next line
    where the rules find nothing, timed together. (document, lines before, edits, ms)."""
    doc = _doc(text)
    before = list(doc.lines)
    history = EditHistory()
    for change in doc.apply(changes, 2):
        history.record(change, 0.0)
    events = history.recent()
    t0 = time.perf_counter()
    props = nextedit.candidates(before, doc, events[-1])
    if props:
        props = judge_edits(engine, tuple(doc.lines), props, events, margin)
    elif refill and (row := refill_row(doc, events[-1])) is not None:
        props = refill_edits(engine, tuple(doc.lines), row, events, margin)
    return doc, before, props, (time.perf_counter() - t0) * 1000


def run_one(engine, source: Source, s: Scenario, margin: float) -> Result:
    """The user's edit applied and recorded as the session records it, then the server's
    next-edit path: the rules' candidates, the model's judgement."""
    doc, before, props, ms = propose(engine, source.text, [((s.row, s.start, s.row, s.end), s.new)], margin)
    removed = body(before[s.row])[s.start:s.end]
    after = {p.row: p.proposed for p in props}
    right = sum(1 for p in props if s.targets.get(p.row) == p.proposed)
    recalled = sum(1 for r, want in s.targets.items() if after.get(r, body(doc.lines[r])) == want)
    reversals = sum(1 for p in props if p.row == s.row or (removed and removed in p.text and s.new in p.original))
    return Result(s, len(props), right, recalled, reversals, ms)


def summarize(results: list[Result]) -> dict:
    if not results:
        return {"n": 0, "precision": None, "recall": None, "reversal_ratio": None, "p50_ms": None, "edits": 0}
    edits = sum(r.edits for r in results)
    targets = sum(len(r.scenario.targets) for r in results)
    return {
        "n": len(results),
        "precision": round(sum(r.right for r in results) / edits, 4) if edits else None,
        "recall": round(sum(r.recalled for r in results) / targets, 4) if targets else None,
        "reversal_ratio": round(sum(r.reversals for r in results) / edits, 4) if edits else 0.0,
        "p50_ms": round(float(np.percentile([r.ms for r in results], 50)), 3),
        "p95_ms": round(float(np.percentile([r.ms for r in results], 95)), 3),
        "edits": edits,
        "targets": targets,
    }


def run(engine, sources: list[Source], kinds: list[str], limit: int, seed: int, margin: float) -> dict:
    out = {}
    for kind in kinds:
        results = [run_one(engine, sources[s.file], s, margin) for s in draw(sources, kind, limit, seed)]
        out[kind] = summarize(results)
    return out
