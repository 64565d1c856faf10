"""Scope benchmark: how often a shown suggestion names something that does not exist there.

    python tests/bench/bench_scope.py [--files LANG=DIR ...] [--cases 20] [--seed 0]
        [--model redraft-diffusion | --model none] [--review both|on|off] [--json OUT] [--show N]

A user writing a function, in real multi-file packages: each cursor sits in a function of a
file of the package, with the rest of that function's body not written yet (removed from the
document; the file's other code stays). Three kinds of cursor, `--cases` of each per language:

  after_def   the first body line, right after the header (BLOCK; the truth is the body)
  line_start  the start of a later body line (the truth: that line)
  mid_line    inside a body line (the truth: the rest of the line)

Each goes through the server's own path (context.text_snapshot, own_drafts with the package's
other files as the workspace, pipeline.answer), with the model or drafts alone (`--model
none`). A shown suggestion's names (bare identifiers it uses and does not bind; attributes,
keyword arguments and types aside: scope.used) are then checked against the real file:

  undefined     bound nowhere in the file (any scope), not a builtin, not used freely in the
                file (a name it gets from elsewhere), and not defined at the top level of any
                file of the package: a name that exists nowhere
  out of scope  not a name the real function binds or uses (before or after the cursor), not
                the file's top-level names, imports or free names, not a builtin (nor, in Go
                or with a glob import, a package top-level name): a name that does not exist
                at that cursor (another function's parameter, say)

beside exact (first line) and correct prefix against the real text over all cursors, so that
a gain in scope is not a loss in quality. `--review off` runs the server as it was without the
draft review (review.py: no scope check, no renaming, no masking), `both` runs both on the
same cursors. Default files: Python cattrs from the virtualenv, TypeScript @azure/msal-common's
sources from editors/vscode/node_modules (after `npm ci`), Go logrus and Rust itertools from
Debian's golang-github-sirupsen-logrus-dev and librust-itertools-dev; missing ones are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from redraft.server.core import context
from redraft.server.core.bindings import BIND, BUILTINS, RULES, SKIP, USE, names
from redraft.server.core.context import own_drafts, text_snapshot
from redraft.server.core.drafts import DraftIndex
from redraft.server.core.languages import new_parser, syntax_for
from redraft.server.core.pipeline import answer
from redraft.server.core.scope import used
from redraft.server.core.settings import ServerConfig
from redraft.server.core.workspace import Workspace
from redraft.server.eval import metrics

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FILES = {
    "python": ROOT / ".venv/lib/python3.11/site-packages/cattrs",
    "typescript": ROOT / "editors/vscode/node_modules/@azure/msal-common/src",
    "go": Path("/usr/share/gocode/src/github.com/sirupsen/logrus"),
    "rust": Path("/usr/share/cargo/registry/itertools-0.10.3/src"),
}
SUFFIX = {"python": ".py", "typescript": ".ts", "go": ".go", "rust": ".rs"}
KINDS = ("after_def", "line_start", "mid_line")
MAX_FILE_CHARS = 60_000
INLINE = ("lambda", "arrow_function", "closure_expression", "func_literal")  # no cursors in these


@dataclass
class File:
    path: Path
    text: str
    tree: object
    lines: list[bytes]
    top: set[str]  # bound at the top level
    anywhere: set[str]  # bound in any scope
    free: set[str]  # used where no function binds them
    globbed: bool


@dataclass
class Case:
    lang: str
    kind: str
    file: File
    cursor: int  # character offset in the document
    document: str
    expected: str
    fn_names: set[str]  # every name the real function binds or uses
    head_start: int  # character offset where the function starts


def _load(lang: str, folder: Path) -> list[File]:
    rules, syntax = RULES[lang], syntax_for(lang)
    parser = new_parser(syntax.grammar)
    out = []
    for path in sorted(folder.rglob("*" + SUFFIX[lang])):
        if path.name.endswith(".d.ts") or "test" in path.name:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if len(text) > MAX_FILE_CHARS:
            continue
        tree = parser.parse(text.encode())
        lines = text.encode().split(b"\n")
        line = lambda r, lines=lines: lines[r] if r < len(lines) else b""  # noqa: E731
        top = {n.text for n in names(tree.root_node, rules, line, enter=lambda nd: nd.type not in rules.scopes)
               if n.role == BIND}
        all_names = list(names(tree.root_node, rules, line))
        anywhere = {n.text for n in all_names if n.role == BIND}
        local = anywhere - top
        free = {n.text for n in all_names if n.role == USE} - local
        globbed = ("import *" in text or "::*" in text or '. "' in text)
        out.append(File(path, text, tree, lines, top, anywhere, free, globbed))
    return out


def _functions(f: File, lang: str):
    rules = RULES[lang]
    stack = [f.tree.root_node]
    while stack:
        n = stack.pop()
        if n.type in rules.functions and n.type not in INLINE:
            body = n.child_by_field_name("body")
            if body is not None and body.end_point[0] - body.start_point[0] >= 3:
                yield n, body
        stack.extend(n.children)


def _cases(lang: str, files: list[File], n: int, seed: int) -> list[Case]:
    rules = RULES[lang]
    out: list[Case] = []
    fns = [(f, fn, body) for f in files for fn, body in _functions(f, lang)]
    for kind in KINDS:
        rng = random.Random(f"{seed}:{lang}:{kind}")
        pool = fns[:]
        rng.shuffle(pool)
        for f, fn, body in pool:
            if sum(1 for c in out if c.kind == kind) >= n:
                break
            case = _case(lang, kind, f, fn, body, rng, rules)
            if case is not None:
                out.append(case)
    return out


def _case(lang: str, kind: str, f: File, fn, body, rng: random.Random, rules) -> Case | None:
    text_lines = f.text.split("\n")
    starts = [0]
    for ln in text_lines:
        starts.append(starts[-1] + len(ln) + 1)
    first = body.start_point[0] + (0 if lang == "python" else 1)
    last = body.end_point[0] if lang == "python" else body.end_point[0] - 1  # (the closing brace stays)
    rows = [r for r in range(first, last + 1) if len(text_lines[r].strip()) >= 8
            and not text_lines[r].strip().startswith(("#", "//", "/*", "*", '"""', "'''"))]
    opening = text_lines[first].strip()
    if not rows or not opening or opening.startswith(("#", "//", "/*", '"', "'", "r\"")):
        return None
    if kind == "after_def":
        row = first
    else:
        rows = [r for r in rows if r > first]
        if not rows:
            return None
        row = rng.choice(rows)
    line = text_lines[row]
    indent = len(line) - len(line.lstrip())
    if kind == "mid_line":
        if len(line.rstrip()) - 2 < indent + 2:
            return None
        col = rng.randint(indent + 2, len(line.rstrip()) - 2)
    else:
        col = indent
    cursor = starts[row] + col
    end = starts[last] + len(text_lines[last])
    if kind == "after_def":
        expected = "\n".join(text_lines[row:last + 1])[col:]
    else:
        expected = line[col:]
    document = f.text[:cursor] + "\n" + f.text[end + 1:] if end + 1 <= len(f.text) else f.text[:cursor] + "\n"
    line_of = lambda r: f.lines[r] if r < len(f.lines) else b""  # noqa: E731
    fn_names = {nm.text for nm in names(_outermost(fn, rules), rules, line_of) if nm.role != SKIP}
    fn_start = starts[fn.start_point[0]]
    return Case(lang, kind, f, cursor, document, expected, fn_names, fn_start)


def _outermost(fn, rules):
    node, best = fn, fn
    while node is not None:
        if node.type in rules.functions:
            best = node
        node = node.parent
    return best


def _judge(case: Case, text: str, package_top: set[str]) -> tuple[list[str], list[str]]:
    """(undefined, out-of-scope) names of a shown suggestion."""
    syntax = syntax_for(case.lang)
    got = used(syntax, case.document[case.head_start:case.cursor], text)
    if got is None:
        return [], []
    f = case.file
    builtins = BUILTINS[case.lang]
    defined = builtins | f.anywhere | f.free | package_top
    scope = builtins | f.top | f.free | case.fn_names
    if case.lang == "go" or f.globbed:
        scope |= package_top
    uses = [u for u in got.uses if u not in got.bound]
    return [u for u in uses if u not in defined], [u for u in uses if u not in scope]


def run(cases: list[Case], engine, config: ServerConfig, packages: dict[str, Workspace],
        package_top: dict[str, set[str]], review: bool, show: int) -> list[dict]:
    saved = context.Review, context.scope_at
    if not review:  # the server as it was: drafts neither checked, renamed nor masked
        context.Review, context.scope_at = (lambda *a: None), (lambda *a: None)
    out = []
    try:
        for i, case in enumerate(cases):
            uri = case.file.path.as_uri()
            snap, doc = text_snapshot(uri, case.document, case.cursor, config, case.lang)
            near = packages[case.lang].nearest(case.file.path)
            snap = own_drafts(snap, doc, config, DraftIndex(doc.lines), near)
            if engine is not None:
                engine.forget(uri)
            t0 = time.perf_counter()
            got = answer(engine, snap)
            ms = (time.perf_counter() - t0) * 1000
            text = "" if got.edit is None else got.edit.text
            undefined, outside = _judge(case, text, package_top[case.lang]) if text else ([], [])
            first = text.split("\n", 1)[0].rstrip()
            row = {"lang": case.lang, "kind": case.kind, "file": case.file.path.name, "shown": bool(text),
                   "exact": bool(text) and first == case.expected.split("\n", 1)[0].rstrip(),
                   "prefix": metrics.correct_prefix(text, case.expected), "undefined": undefined,
                   "out_of_scope": outside, "source": got.source, "ms": ms, "text": text,
                   "expected": case.expected.split("\n", 1)[0]}
            out.append(row)
            if i < show:
                print(f"  {case.lang} {case.kind} {row['file']}: {text!r} [{got.source}] "
                      f"want {row['expected']!r} undefined={undefined} out={outside}", file=sys.stderr)
    finally:
        context.Review, context.scope_at = saved
    return out


def summary(rows: list[dict]) -> dict:
    shown = [r for r in rows if r["shown"]]
    n = len(rows)
    return {"cursors": n, "shown": len(shown),
            "exact": sum(r["exact"] for r in rows) / max(n, 1),
            "prefix": sum(r["prefix"] for r in rows) / max(n, 1),
            "undefined": sum(bool(r["undefined"]) for r in shown) / max(len(shown), 1),
            "out_of_scope": sum(bool(r["out_of_scope"]) for r in shown) / max(len(shown), 1),
            "ms_p50": sorted(r["ms"] for r in rows)[n // 2] if n else 0.0}


def table(results: dict[str, list[dict]]) -> str:
    head = "| review | language | kind | cursors | shown | exact | prefix | undefined | out of scope |"
    lines = [head, "|" + "---|" * 9]
    for name, rows in results.items():
        groups = {}
        for r in rows:
            groups.setdefault((r["lang"], r["kind"]), []).append(r)
            groups.setdefault((r["lang"], "all"), []).append(r)
            groups.setdefault(("all", "all"), []).append(r)
        for (lang, kind), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
            s = summary(rs)
            lines.append(f"| {name} | {lang} | {kind} | {s['cursors']} | {s['shown']} | {s['exact']:.3f} | "
                         f"{s['prefix']:.3f} | {s['undefined']:.1%} | {s['out_of_scope']:.1%} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", nargs="*", default=[], help="LANG=DIR (python, typescript, go, rust)")
    ap.add_argument("--cases", type=int, default=20, help="cursors per language and kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="redraft-diffusion", help='a model, or "none" for drafts alone')
    ap.add_argument("--review", choices=("both", "on", "off"), default="both")
    ap.add_argument("--languages", default="python,typescript,go,rust")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--show", type=int, default=0, help="print the first N answers of each run")
    args = ap.parse_args()
    folders = dict(DEFAULT_FILES)
    for spec in args.files:
        lang, _, folder = spec.partition("=")
        folders[lang] = Path(folder)
    cases, packages, tops = [], {}, {}
    for lang in args.languages.split(","):
        folder = folders.get(lang)
        if folder is None or not folder.is_dir():
            print(f"{lang}: no files at {folder}, skipped", file=sys.stderr)
            continue
        files = _load(lang, folder)
        packages[lang] = Workspace.of_texts({f.path: f.text for f in files})
        tops[lang] = set().union(*(f.top for f in files)) if files else set()
        cases += _cases(lang, files, args.cases, args.seed)
        print(f"{lang}: {len(files)} files under {folder}", file=sys.stderr)
    engine = None
    if args.model != "none":
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from redraft.engine import Engine
        engine = Engine.load(args.model)
    config = ServerConfig()
    runs = ("off", "on") if args.review == "both" else (args.review,)
    results = {name: run(cases, engine, config, packages, tops, name == "on", args.show) for name in runs}
    print(f"model {args.model}, {len(cases)} cursors, seed {args.seed}")
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"model": args.model, "seed": args.seed, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
