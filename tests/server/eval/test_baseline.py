"""The plain-copy baseline of `redraft eval infill`, its row in the report, and `--plot`."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

import tiny
from redraft.server.core import linecopy
from redraft.server.core.context import Draft, text_snapshot
from redraft.server.core.document import split_lines
from redraft.server.core.drafts import DraftIndex
from redraft.server.core.inference import answer_from_drafts
from redraft.server.core.settings import ServerConfig
from redraft.server.eval import baseline, samples
from redraft.server.eval.infill import FIELDS, copy_sample, format_table, report, score_sample

# The cursor sits after "return shape.width" in `again`. Earlier, `area` matches it longest
# (from "(shape):" on), `other` matches nearer but shorter; a later copy of `again` would
# match longer still and continue differently, but the baseline never looks past the cursor.
REPEATED = '''def area(shape):
    return shape.width * shape.height


def other(shape):
    x = shape.width - 1
    return x


def again(shape):
    return shape.width * shape.height


def frobnicate(tail):
    return undefined_name(tail) + 1


def again(shape):
    return shape.width + 99
'''


def _cursor_after(text: str, head: str, nth: int = 0) -> samples.Sample:
    """A rest_of_line sample with the cursor right after the `nth` occurrence of `head`."""
    at = -1
    for _ in range(nth + 1):
        at = text.index(head, at + 1)
    start = at + len(head)
    end = text.index("\n", start)
    row = text.count("\n", 0, start)
    return samples.Sample("rest_of_line", 0, row, start - (text.rfind("\n", 0, start) + 1), start, end,
                          text[start:end])


@pytest.fixture()
def source():
    return samples.Source("shapes.py", REPEATED)


def test_copy_continues_the_longest_earlier_match(source):
    s = _cursor_after(REPEATED, "    return shape.width", nth=1)  # in the first `again`
    prefix = REPEATED[:s.start]
    index = DraftIndex(split_lines(prefix))
    best = index.find(prefix, exclude=(s.line, s.col))[0]
    area = REPEATED.split("\n").index("    return shape.width * shape.height")
    assert (best.row, index.continuation(best.row, best.col)) == (area, " * shape.height")
    assert baseline.copy_draft(index, prefix, 1) == " * shape.height"
    got = copy_sample(source, s, ServerConfig(drafts="only"))
    assert got.edit is not None and got.edit.text == " * shape.height" and got.source == baseline.PLAIN
    assert not got.ran_model and got.stats.forwards == 0


def test_copy_abstains_without_an_earlier_match(source):
    s = _cursor_after(REPEATED, "    return undefined_name")
    assert REPEATED[:s.start].count("d_name") == 1  # the 6 characters a match needs, only at the cursor
    assert baseline.copy_draft(DraftIndex(split_lines(REPEATED[:s.start])), REPEATED[:s.start], 1) is None
    assert copy_sample(source, s, ServerConfig(drafts="only")).edit is None


def test_report_carries_the_copy_row_and_ratios(source):
    hit = _cursor_after(REPEATED, "    return shape.width", nth=1)  # `again`: copy is right
    miss = _cursor_after(REPEATED, "    return undefined_name")  # nothing earlier: copy abstains
    assert hit.expected == " * shape.height"
    outs = [score_sample(None, source, s, ServerConfig(drafts="only")) for s in (hit, miss)]
    assert outs[0].copy.exact_match and outs[0].copy.text == " * shape.height"
    assert outs[1].copy.abstained and not outs[1].copy.exact_match and outs[1].copy.correct_prefix == 0.0
    rep = report("drafts", [source], 0, {"rest_of_line": outs}, "only")
    row = rep["kinds"]["rest_of_line"]
    copy = row["copy"]
    assert set(copy) == set(FIELDS) | {"sources"}
    assert copy["n"] == 2 and copy["exact_match"] == 0.5 and copy["abstain_rate"] == 0.5
    assert copy["sources"] == {baseline.PLAIN: 1} and copy["forwards"] == 0.0
    assert copy["tokens_per_forward"] is None and row["tokens_per_forward"] is None
    assert row["vs_copy"]["exact_match"] == pytest.approx(row["exact_match"] / 0.5, abs=1e-3)
    assert row["vs_copy"]["correct_prefix"] == pytest.approx(row["correct_prefix"] / copy["correct_prefix"], abs=1e-3)
    assert rep["notes"] == ["no model forwards in rest_of_line: tokens_per_forward is None"]
    table = format_table(rep).split("\n")
    assert any(ln.startswith("rest_of_line  copy") and " 0.500 " in ln for ln in table)
    assert any(ln.startswith("note: no model forwards in rest_of_line") for ln in table)


def test_ratio():
    assert baseline.ratio(0.3, 0.2) == 1.5
    assert baseline.ratio(0.3, 0.0) is None and baseline.ratio(None, 0.2) is None


# -- the command -----------------------------------------------------------------------------

def redraft(*args):
    return subprocess.run([sys.executable, "-m", "redraft.server.cli", *args], capture_output=True, text=True,
                          timeout=600)


def test_json_has_copy_rows_and_plot_writes_a_png(tmp_path_factory, tmp_path):
    folder = tmp_path_factory.mktemp("copy-src")
    (folder / "shapes.py").write_text(REPEATED, encoding="utf-8")
    model = tiny.make_family(tmp_path_factory.mktemp("copy-model") / "dream", "dream")
    png = tmp_path / "eval.png"
    out = redraft("eval", "infill", "--files", str(folder), "--model", str(model), "--limit", "3", "--json",
                  "--dtype", "float32", "--kinds", "rest_of_line,block", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    for kind, s in rep["kinds"].items():
        assert s["copy"]["n"] == s["n"] >= 1, kind
        assert set(s["vs_copy"]) == {"exact_match", "correct_prefix"}
        assert s["forwards"] >= 1 and s["tokens_per_forward"] > 0 and s["copy"]["tokens_per_forward"] is None
    assert rep["notes"] == []
    data = png.read_bytes()
    assert len(data) > 10_000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_to_a_missing_folder_fails_before_the_run(tmp_path):
    (tmp_path / "a.py").write_text(REPEATED)
    out = redraft("eval", "infill", "--files", str(tmp_path), "--drafts", "only", "--plot",
                  str(tmp_path / "nowhere" / "eval.png"))
    assert out.returncode == 2 and "no folder" in out.stderr and "Traceback" not in out.stderr


def test_the_copy_is_the_copy_alone_whatever_the_names_setting():
    # The copy continues `value_t` with `otal:`, which post-processing rejects here; the server
    # would then complete the name (names.py); the baseline shows what a plain copy shows.
    text = "if value_total:\n    pass\nx = value_t"
    snap, _ = text_snapshot("file:///v.py", text + "\n", len(text), ServerConfig(drafts="only"), "python")
    assert baseline.copy_draft(DraftIndex(split_lines(text)), text, 1) == "otal:"
    server = answer_from_drafts(replace(snap, drafts=(Draft("otal:", "buffer"),)))
    assert server.source == "name" and server.edit.text == "otal"
    got = baseline.copy_answer(snap, text, "\n")
    assert (got.edit.text, got.source) == ("otal:", baseline.PLAIN)
    assert baseline._index_copy(snap, DraftIndex(split_lines(text)), text).edit is None


# -- the plain copy: what a 20-line copy server answers ------------------------------------------

def test_plain_copy_takes_the_nearest_occurrence_above():
    before = "a = f(x, 1)\nb = f(x, 2)\nc = f(x"
    assert linecopy.plain_copy(before, "\n") == ", 2)"


def test_plain_copy_takes_the_longest_suffix_first():
    # " = g(" is longer than "g(" and only the first line has it; the nearer line has "g(" alone.
    before = "k = g(1, 'long')\nprint(g(2))\nm = g("
    assert linecopy.plain_copy(before, "") == "1, 'long')"


def test_plain_copy_looks_below_when_nothing_above_matches():
    before = "def main():\n    run_all(sys"
    after = "\n\n\ndef run_all(items):\n    pass\n\nrun_all(sys.argv[1:])\n"
    assert linecopy.plain_copy(before, after) == ".argv[1:])"


def test_plain_copy_abstains_on_its_own_text_and_at_a_line_end():
    assert linecopy.plain_copy("x = unique_name", "\n") is None  # only the cursor's own occurrence
    assert linecopy.plain_copy("x = 1 + total\ntotal", "") is None  # the match ends its line: nothing to copy
    assert linecopy.plain_copy("ab\nab", "") is None  # under 3 characters: no key


def test_the_baseline_answers_wherever_the_plain_copy_does():
    # Nothing above the cursor continues `later_value(`; a later line does: only the plain copy
    # (which also looks below) answers, and the baseline shows its text.
    text = "x = later_value(\ny = later_value(alpha, beta)\n"
    cursor = text.index("(") + 1
    snap, _ = text_snapshot("file:///c.py", text, cursor, ServerConfig(drafts="only"), "python")
    assert baseline.copy_draft(DraftIndex(split_lines(text[:cursor])), text[:cursor], 1) is None
    got = baseline.copy_answer(snap, text[:cursor], text[cursor:])
    assert (got.edit.text, got.source) == ("alpha, beta)", baseline.PLAIN)
