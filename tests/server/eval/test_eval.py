"""`redraft eval infill`: metrics on hand-made strings, deterministic sampling, end to end."""

import json
import subprocess
import sys

import pytest

import tiny
from redraft.server.eval import infill, metrics, samples, syntax
from redraft.server.core.settings import ServerConfig
from redraft.server.core import context
from redraft.server.eval.infill import FIELDS, RATES, answer_sample, parse_kinds, score, snapshot, summarize

GEOMETRY = '''"""Shapes."""
import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        # pi r squared
        return math.pi * self.radius ** 2


def total_area(shapes):
    total = 0.0
    for shape in shapes:
        if shape.radius > 0:
            total += shape.area()
    return total
'''

ITEMS = '''# Items and names.
name = "héllo wörld ✓"
items = [1, 2, 3, 4]
squares = [x * x for x in items if x % 2 == 0]
r"raw string start"


def describe(values):
    text = ", ".join(str(v) for v in values)
    print(f"values: {text}")
    return len(text)
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-src")
    (root / "geometry.py").write_text(GEOMETRY, encoding="utf-8")
    (root / "sub").mkdir()
    (root / "sub" / "items.py").write_text(ITEMS, encoding="utf-8")
    (root / "notes.txt").write_text("not python\n")
    return root


@pytest.fixture(scope="module")
def sources(folder):
    found, skipped = samples.load_sources(folder)
    assert [s.path for s in found] == ["geometry.py", "sub/items.py"] and skipped == []
    return found


# -- metrics ---------------------------------------------------------------------------------

def test_exact_match_per_kind():
    assert metrics.exact_match("rest_of_line", "x + 1  ", "x + 1")
    assert not metrics.exact_match("rest_of_line", "x + 2", "x + 1")
    assert metrics.exact_match("next_line", "    y = 2   \n\n", "    y = 2")
    assert not metrics.exact_match("next_line", "y = 2", "    y = 2")  # indentation counts
    assert metrics.exact_match("block", "    a = 1  \n    b = 2\n\n", "    a = 1\n    b = 2")
    assert not metrics.exact_match("block", "    a = 1\n", "    a = 1\n    b = 2")
    assert metrics.exact_match("node", "f(a,  \n  b)", "f(a,\n  b)")
    assert not metrics.exact_match("node", "f(a)\n", "f(a)")  # a trailing newline is not ignored


def test_correct_prefix_and_edit_similarity():
    assert metrics.correct_prefix("abcx", "abcd") == 0.75
    assert metrics.correct_prefix("", "abcd") == 0.0
    assert metrics.correct_prefix("abcdef", "abcd") == 1.0
    assert metrics.edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert metrics.edit_similarity("", "") == 1.0
    assert metrics.edit_similarity("", "abc") == 0.0
    assert metrics.edit_similarity("same", "same") == 1.0


def test_cut_at_the_end_of_each_unit():
    assert metrics.cut("rest_of_line", "x + 1\ny = 2") == "x + 1"
    assert metrics.cut("next_line", "    y = 2\n    z") == "    y = 2"
    body = "        a = 1\n\n        b = 2\n    def g(self):\n        pass"
    assert metrics.cut("block", body, header_indent=4) == "        a = 1\n\n        b = 2"
    nine = "".join(f"    x{i} = {i}\n" for i in range(9))
    assert metrics.cut("block", nine, header_indent=0) == "".join(f"    x{i} = {i}\n" for i in range(8))[:-1]
    assert metrics.cut("node", "f(a)\nmore") == "f(a)\nmore"


@pytest.mark.parametrize("kind,text,indent", [
    ("rest_of_line", "x + 1\ny = 2", 0),
    ("next_line", "    y = 2\n    z = 3\n", 0),
    ("block", "        a = 1\n\n        b = 2\n    def g(self):\n        pass", 4),
    ("block", "".join(f"    x{i} = {i}\n" for i in range(10)), 0),
    ("block", "    a = 1\n    b = 2", 0),
])
def test_unit_ended_agrees_with_cut(kind, text, indent):
    """Stopping at the first prefix where the unit has ended keeps the same cut as the whole text."""
    final = metrics.cut(kind, text, indent)
    for k in range(len(text) + 1):
        if metrics.unit_ended(kind, text[:k], indent):
            assert metrics.cut(kind, text[:k], indent) == final
            break


def test_syntax_valid_counts_new_errors_only():
    text = "def f(x):\n    return x + 1\n"
    start = text.index("x + 1")
    end = start + len("x + 1")
    assert syntax.count_errors(text) == 0
    assert syntax.syntax_valid(text, start, end, "x * 2")
    assert not syntax.syntax_valid(text, start, end, "x + (")
    assert not syntax.syntax_valid(text, start, end, "x +")
    broken = "def f(x):\n    return x + 1\ny = (\n"
    assert syntax.count_errors(broken) > 0
    assert syntax.syntax_valid(broken, start, end, "x - 1")  # errors already there do not count


def test_node_spans_are_expressions_and_statements():
    text = "total = compute(a, b) + 1\nif total > 10:\n    return total\n"
    spans = {text[s:e] for s, e in syntax.node_spans(text)}
    assert {"compute(a, b) + 1", "compute(a, b)", "(a, b)", "total > 10", "return total"} <= spans
    unicode = 'x = f("é", y)\n'
    assert '("é", y)' in {unicode[s:e] for s, e in syntax.node_spans(unicode)}


# -- sampling --------------------------------------------------------------------------------

def test_sampling_is_deterministic(sources):
    for kind in samples.KINDS:
        a = samples.draw(sources, kind, 5, seed=3)
        assert a == samples.draw(sources, kind, 5, seed=3)
        assert a, kind
    assert samples.draw(sources, "rest_of_line", 5, 3) != samples.draw(sources, "rest_of_line", 5, 4)


@pytest.mark.parametrize("kind", samples.KINDS)
def test_samples_satisfy_the_filters_and_rebuild_the_file(sources, kind):
    drawn = samples.draw(sources, kind, 50, seed=0)
    assert len(drawn) == len({(s.file, s.start, s.end) for s in drawn})
    for s in drawn:
        text = sources[s.file].text
        prefix, suffix = s.split(text)
        assert prefix + s.expected + suffix == text
        lines = text.split("\n")
        line = lines[s.line]
        assert sum(len(x) + 1 for x in lines[:s.line]) + s.col == s.start
        if kind in ("rest_of_line", "next_line"):
            assert samples.qualifies(line) and not line.lstrip().startswith(("#", '"', "'", 'r"'))
            assert s.expected == line[s.col:] and "\n" not in s.expected
        if kind == "rest_of_line":
            indent = len(line) - len(line.lstrip())
            assert indent + 2 <= s.col <= len(line.rstrip()) - 2
        elif kind == "next_line":
            assert s.col == 0 and s.expected == line
        elif kind == "block":
            header = max(i for i in range(s.line) if lines[i].strip())
            assert lines[header].rstrip().endswith(":") and s.col == 0
            assert s.header_indent == len(lines[header]) - len(lines[header].lstrip())
            body = [x for x in s.expected.split("\n") if x.strip()]
            assert 2 <= len(body) <= 8
            assert all(len(x) - len(x.lstrip()) > s.header_indent for x in body)
            after = next((x for x in suffix.split("\n")[1:] if x.strip()), None)
            assert after is None or len(after) - len(after.lstrip()) <= s.header_indent
        elif kind == "node":
            assert 4 <= len(s.expected) <= 200 and s.expected.count("\n") <= 2
            assert (s.start, s.end) in syntax.node_spans(text)


def test_a_kind_does_not_depend_on_the_others(sources):
    alone = samples.draw(sources, "block", 3, 1)
    assert alone == samples.draw(sources, "block", 3, 1)
    drawn = {k: samples.draw(sources, k, 3, 1) for k in ("node", "block")}
    assert drawn["block"] == alone
    assert parse_kinds("node, block,node") == ["node", "block"]
    assert parse_kinds(None) == list(samples.KINDS)
    with pytest.raises(ValueError):
        parse_kinds("lines")


# -- running: which completion path, and the report ------------------------------------------

@pytest.fixture(scope="module")
def ar_engine(tmp_path_factory):
    from redraft.engine import Engine
    return Engine.load(tiny.make_family(tmp_path_factory.mktemp("ar") / "ar", "redraft-ar", seed=5), dtype="float32")


def test_causal_models_stop_at_the_end_of_the_unit(sources, ar_engine):
    """With `stop`, decoding ends where the unit ends: same cut text, fewer forwards."""
    fewer = 0
    for s in samples.draw(sources, "next_line", 5, 0):
        src = sources[s.file]
        config = ServerConfig(drafts="off")
        stopped = answer_sample(ar_engine, src, s, config)
        snap, _ = snapshot(src, s, config)  # the same windows, without the unit-end stop
        ctx = context.build(snap, ar_engine.count_tokens, ar_engine.context_budget(config.block_tokens))
        full = ar_engine.infill(ctx.prefix, ctx.suffix, sampler=ar_engine.config.sampler.with_(span=ctx.span))
        assert metrics.cut(s.kind, stopped.raw, s.header_indent) == metrics.cut(s.kind, full.text, s.header_indent)
        assert stopped.stats.forwards <= full.stats.forwards
        fewer += stopped.stats.forwards < full.stats.forwards
    assert fewer > 0


def test_spans_are_the_kinds_or_the_servers(sources, ar_engine):
    """spans "kind" gives each kind room for its whole expected text; "server" asks for what
    the server asks (lineTokens / blockTokens): a block then ends within its 48 tokens."""
    config = ServerConfig(drafts="off")
    blocks = samples.draw(sources, "block", 5, 0)
    assert blocks
    for s in blocks:
        src = sources[s.file]
        assert snapshot(src, s, config)[0].config.block_tokens == samples.SPAN_BUDGET["block"]
        assert snapshot(src, s, config, "server")[0].config.block_tokens == config.block_tokens
        short = answer_sample(ar_engine, src, s, config, spans="server")
        assert short.stats.span_tokens <= config.block_tokens < samples.SPAN_BUDGET["block"]


def test_score_and_summary():
    src = samples.Source("a.py", "def f(x):\n    return x + 1\n")
    start = src.text.index("x + 1")
    s = samples.Sample("rest_of_line", 0, 1, start - 10, start, start + 5, "x + 1")
    from redraft.engine import Stats
    stats = Stats(total_ms=10.0, encode_ms=2.0, generate_ms=8.0, forwards=4, span_tokens=6)
    good, bad = score(src, s, "x + 1\n# next", stats), score(src, s, "x + (", stats)
    assert good.text == "x + 1" and good.exact_match and good.syntax_valid and good.correct_prefix == 1.0
    assert not bad.exact_match and not bad.syntax_valid and bad.correct_prefix == 0.8
    summary = summarize([good, bad])
    assert summary["n"] == 2 and summary["exact_match"] == 0.5 and summary["syntax_valid"] == 0.5
    assert summary["p50_ms"] == 10.0 and summary["tokens_per_forward"] == 1.5
    assert summarize([])["exact_match"] is None


# -- the command, as a user runs it ----------------------------------------------------------

def redraft(*args):
    return subprocess.run([sys.executable, "-m", "redraft.server.cli", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("family", ["dream", "redraft-ar"])
def test_eval_infill_json(tmp_path_factory, folder, family):
    model = tiny.make_family(tmp_path_factory.mktemp("eval-model") / family, family)
    out = redraft("eval", "infill", "--files", str(folder), "--model", str(model), "--limit", "3", "--json",
                  "--dtype", "float32", "--seed", "1")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["files"] == 2 and rep["seed"] == 1 and rep["model"] == family
    assert list(rep["kinds"]) == list(samples.KINDS)
    for kind, s in rep["kinds"].items():
        assert set(s) == set(FIELDS) | {"sources", "copy", "vs_copy"}, kind
        assert s["n"] == s["copy"]["n"] == 3, kind
        for rate in RATES:
            assert 0.0 <= s[rate] <= 1.0, (kind, rate)
        assert s["p95_ms"] >= s["p50_ms"] > 0 and s["forwards"] >= 1 and s["tokens_per_forward"] > 0
        # one per token at most, plus judging the drafts and scoring the candidates
        assert s["forwards"] <= samples.SPAN_BUDGET[kind] + 2


def test_eval_infill_reports_the_twin_on_the_same_samples(tmp_path_factory, folder):
    root = tmp_path_factory.mktemp("eval-twin")
    model, twin = tiny.make_family(root / "dream", "dream"), tiny.make_family(root / "ar", "redraft-ar")
    args = ("--files", str(folder), "--limit", "2", "--dtype", "float32", "--seed", "1", "--kinds", "rest_of_line,block")
    out = redraft("eval", "infill", *args, "--model", str(model), "--twin", str(twin), "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    alone = json.loads(redraft("eval", "infill", *args, "--model", str(twin), "--json").stdout)
    assert rep["model"] == "dream" and rep["twin"] == "ar"
    assert list(rep["kinds"]) == ["rest_of_line", "block"]
    for kind, s in rep["kinds"].items():
        t, vs = s["twin"], s["vs_twin"]
        # the twin's row is what the twin scores alone on those samples
        for key in ("n", *RATES, "abstain_rate", "forwards"):
            assert t[key] == alone["kinds"][kind][key], (kind, key)
        assert vs["generate_ms"] == round(s["generate_ms"] / t["generate_ms"], 3)
        assert vs["exact_match"] == round(s["exact_match"] - t["exact_match"], 4)
    table = redraft("eval", "infill", *args, "--model", str(model), "--twin", str(twin))
    assert table.returncode == 0 and "twin: ar" in table.stdout and "x the twin's generate time" in table.stdout
    refused = redraft("eval", "infill", *args, "--drafts", "only", "--twin", str(twin))
    assert refused.returncode == 2 and "--twin" in refused.stderr


def test_side_by_side_answers_each_sample_with_both_engines_in_alternating_order(tmp_path_factory, folder):
    """The twin answers each sample right beside the model, first on every other sample, and
    each engine's outcomes are what it gives alone."""
    from redraft.engine import Engine
    root = tmp_path_factory.mktemp("side-by-side")
    a = Engine.load(tiny.make_family(root / "rd", "redraft"), dtype="float32")
    b = Engine.load(tiny.make_family(root / "ar", "redraft-ar"), dtype="float32")
    found, _ = samples.load_sources(folder)
    seen = []
    both = infill.run_side_by_side([a, b], found, ["next_line"], 4, 3, ServerConfig(), on_outcome=seen.append)
    assert len(both) == 2 and len(both[0]["next_line"]) == len(both[1]["next_line"]) == 4
    owner = [0 if any(o is x for x in both[0]["next_line"]) else 1 for o in seen]
    assert owner == [0, 1, 1, 0, 0, 1, 1, 0]
    for engine, got in ((a, both[0]), (b, both[1])):
        alone = infill.run(engine, found, ["next_line"], 4, 3, ServerConfig())["next_line"]
        assert [(o.raw, o.abstained) for o in got["next_line"]] == [(o.raw, o.abstained) for o in alone]
        assert any(o.stats is not None and o.stats.forwards > 0 for o in alone)


def test_eval_infill_twin_without_lookup_decodes_token_by_token_to_the_same_text(tmp_path_factory, folder):
    root = tmp_path_factory.mktemp("eval-plain-twin")
    model, twin = tiny.make_family(root / "rd", "redraft"), tiny.make_family(root / "ar", "redraft-ar")
    args = ("--files", str(folder), "--limit", "3", "--dtype", "float32", "--seed", "2", "--kinds", "next_line,block",
            "--model", str(model), "--twin", str(twin), "--json")
    runs = {}
    for lookup in ("on", "off"):
        out = redraft("eval", "infill", *args, "--twin-lookup", lookup, "--span-window", "on", "--window-refresh", "2",
                      "--window-lookup", lookup, "--window-guesses", "2" if lookup == "on" else "0")
        assert out.returncode == 0, out.stderr
        runs[lookup] = json.loads(out.stdout)["kinds"]
    assert list(runs["off"]) == ["next_line", "block"]
    for kind, s in runs["off"].items():
        on = runs["on"][kind]["twin"]
        assert s["twin"]["n"] == on["n"] == 3
        # greedy either way (float32): the same answers; plain decoding commits at most one token a forward
        for key in (*RATES, "abstain_rate"):
            assert s["twin"][key] == on[key], (kind, key)
        assert s["twin"]["forwards"] >= on["forwards"]
        assert s["twin"]["tokens_per_forward"] is None or s["twin"]["tokens_per_forward"] <= 1.0
        assert s["forwards"] >= 1  # the diffusion model ran, with its span windows
    bad = redraft("eval", "infill", *args, "--window-refresh", "-1")
    assert bad.returncode == 2 and "--window-refresh" in bad.stderr and "Traceback" not in bad.stderr


def test_eval_infill_min_score_bars_the_model_and_leaves_the_twin_alone(tmp_path_factory, folder):
    root = tmp_path_factory.mktemp("eval-min-score")
    model, twin = tiny.make_family(root / "rd", "redraft"), tiny.make_family(root / "ar", "redraft-ar")
    args = ("--files", str(folder), "--limit", "3", "--dtype", "float32", "--seed", "1", "--kinds", "rest_of_line,block",
            "--drafts", "off", "--names", "off", "--cache", "off", "--model", str(model), "--twin", str(twin), "--json")
    runs = {}
    for bar in (None, "0"):
        out = redraft("eval", "infill", *args, *(() if bar is None else ("--min-score", bar)))
        assert out.returncode == 0, out.stderr
        runs[bar] = json.loads(out.stdout)["kinds"]
    assert list(runs["0"]) == ["rest_of_line", "block"]
    assert any(s["abstain_rate"] < 1.0 for s in runs[None].values())  # without the bar the model answers
    for kind, s in runs["0"].items():
        # every answer's mean log-probability is below 0: the model shows nothing, the twin as before
        assert s["n"] == 3 and s["abstain_rate"] == 1.0 and s["exact_match"] == 0.0, kind
        for key in (*RATES, "abstain_rate", "forwards"):
            assert s["twin"][key] == runs[None][kind]["twin"][key], (kind, key)
    bad = redraft("eval", "infill", *args, "--min-score", "nan")
    assert bad.returncode == 2 and "--min-score" in bad.stderr and "Traceback" not in bad.stderr


def test_eval_infill_user_errors(folder, tmp_path):
    out = redraft("eval", "infill", "--files", str(folder), "--kinds", "lines")
    assert out.returncode == 2 and "unknown kind" in out.stderr and "Traceback" not in out.stderr
    out = redraft("eval", "infill", "--files", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "not a folder" in out.stderr
    out = redraft("eval", "infill", "--files", str(tmp_path))
    assert out.returncode == 2 and "no readable *.py files" in out.stderr
    out = redraft("eval", "infill", "--files", str(folder), "--model", str(tmp_path))
    assert out.returncode == 2 and "config.json" in out.stderr and "Traceback" not in out.stderr
    out = redraft("eval", "infill", "--files", str(folder), "--context-tokens", "5")
    assert out.returncode == 2 and "--context-tokens must be at least 16" in out.stderr
    out = redraft("eval", "infill", "--files", str(folder), "--window-guesses", "99")
    assert out.returncode == 2 and "--window-guesses must be in 0..16" in out.stderr and "Traceback" not in out.stderr


def test_eval_next_edit_json(folder, tmp_path_factory):
    out = redraft("eval", "next-edit", "--files", str(folder), "--no-model", "--limit", "5", "--json")
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["model"] is None and rep["files"] == 2
    rename = rep["kinds"]["rename_param"]
    assert rename["n"] >= 1 and rename["precision"] == 1.0 and rename["recall"] == 1.0
    assert rename["reversal_ratio"] == 0.0 and rename["p50_ms"] >= 0
    model = tiny.make_family(tmp_path_factory.mktemp("ne") / "redraft", "redraft")
    out = redraft("eval", "next-edit", "--files", str(folder), "--model", str(model), "--limit", "2",
                  "--kinds", "rename_param", "--margin", "-100")
    assert out.returncode == 0, out.stderr
    assert "rename_param" in out.stdout and "precision" in out.stdout
    out = redraft("eval", "next-edit", "--files", str(folder), "--kinds", "typo")
    assert out.returncode == 2 and "unknown kind" in out.stderr


def test_the_workspace_gives_drafts_from_the_other_files_of_a_package(tmp_path):
    """`--workspace`: a sample's drafts also come from its package's other files (not another
    package's), as the server's come from the client's root folder; the copy baseline stays
    with the sample's own file."""
    call = "    return normalize_record(record, schema=SCHEMA, strict=True, defaults=None)\n"
    defined = "\n\nSCHEMA = {}\n"  # (a draft naming what the file does not define is not shown)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "reader.py").write_text(f"def read(record):\n{call}{defined}")
    (tmp_path / "app" / "writer.py").write_text(f"def write(record):\n{call}{defined}")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "solo.py").write_text(f"def solo(record):\n{call}{defined}")
    found, _ = samples.load_sources(tmp_path)
    f = next(i for i, s in enumerate(found) if s.path == "app/writer.py")
    text = found[f].text
    start = text.index("schema=")
    end = text.index("\n", start)
    sample = samples.Sample("rest_of_line", f, 1, start - text.index("    return"), start, end, text[start:end])
    config = ServerConfig(drafts="only")
    alone = answer_sample(None, found[sample.file], sample, config)
    assert alone.edit is None  # nothing earlier in its own file continues it
    spaces = infill.packages(found)
    assert sorted(spaces) == ["app", "other"]
    got = answer_sample(None, found[sample.file], sample, config, spaces["app"])
    assert got.source == "workspace" and got.edit.text == found[sample.file].text[sample.start:sample.end]
    out = infill.run(None, found, ["rest_of_line"], 20, 0, config, workspace=True)["rest_of_line"]
    assert out and any(o.source == "workspace" for o in out)
    assert not any(o.copy.source == "workspace" for o in out)


GO_SWITCH = ("package p\n\nfunc kind(v int) string {\n\tswitch v {\n\tcase 1:\n\t\ta := 1\n\t\tb := a + 1\n"
             "\t\treturn \"one\"\n\tcase 2:\n\t\tc := 2\n\t\td := c * 2\n\t\treturn \"two\"\n\t}\n\treturn \"\"\n}\n")


def test_a_tab_indented_blocks_header_is_measured_as_the_unit_cut_measures_its_body():
    """A Go case body under a tab-indented header: the header's width counts a tab as 4, as the
    unit cut does for the body's lines, so a completion running on into the next case is cut
    where that case begins (counting the tab as one column, no line was ever a dedent)."""
    drawn = samples.draw([samples.Source("p/kind.go", GO_SWITCH)], "block", 5, 0)
    assert drawn and all(s.header_indent == 4 for s in drawn)
    first = next(s for s in drawn if s.expected.startswith("\t\ta := 1"))
    ran_on = "\t\ta := 1\n\t\tb := a + 1\n\t\treturn \"one\"\n\tcase 2:\n\t\tc := 2"
    assert metrics.cut("block", ran_on, first.header_indent) == "\t\ta := 1\n\t\tb := a + 1\n\t\treturn \"one\""
