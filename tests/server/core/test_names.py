"""Completing a partly typed name from the names the code uses (names.py, inference.after_name)."""

from __future__ import annotations

import pytest

from redraft.engine import Engine
from redraft.server.core.context import own_drafts, text_snapshot
from redraft.server.core.inference import answer
from redraft.server.core.names import forced_name, partial_word
from redraft.server.core.settings import ServerConfig


def snap_at(text: str, config: ServerConfig = ServerConfig(), language: str = "python"):
    at = text.index("|")
    return text_snapshot("file:///t.py", text.replace("|", ""), at, config, language)


@pytest.mark.parametrize("left, word", [("    x = isinstance(value, tup", "tup"), ("except FileNo", "FileNo"),
                                        ("n = 0x1F", ""), ("total = 12", ""), ("print(a, ", ""),
                                        ("naïve_valu", "naïve_valu"), ("x = " + "a" * 100_000, "")])
def test_the_partial_word_is_the_identifier_the_text_ends_in(left, word):
    assert partial_word(left) == word


def test_a_builtin_completes_a_word_the_model_left_unknown():
    snap, _ = snap_at("try:\n    import yaml\nexcept FileNo|\n")
    assert forced_name(snap, "t:") == "tFoundError"  # `FileNot` is no name; the built-in is
    assert forced_name(snap, "tFoundError:") == ""  # the model's own word is the built-in: kept
    snap, _ = snap_at("try:\n    run()\nexcept Key|\n")
    assert forced_name(snap, "") == "Error"  # KeyError, KeyboardInterrupt: the shortest of the unused built-ins


def test_a_name_from_the_file_wins_and_the_typed_word_itself_is_no_evidence():
    text = "records_by_day = {}\nrecords_by_day[1] = 2\nrecent = 3\n\nprint(recor|\n"
    snap, _ = snap_at(text)
    assert forced_name(snap, "d)") == "ds_by_day"  # `record` is used nowhere
    assert forced_name(snap, "ds_by_day)") == ""
    # The word being typed is left out: `alph` + "a" makes `alpha`, which only the cursor's word holds.
    snap, _ = snap_at("x = alpha_beta\ny = alph|\n")
    assert forced_name(snap, "a") == "a_beta"


def test_the_more_frequent_name_wins_then_the_nearer():
    far_often = "value_total = 1\nvalue_total += 2\nvalue_total -= 3\n"
    near_once = "value_items = []\n"
    snap, _ = snap_at(far_often + near_once + "print(valu|)\n")
    assert forced_name(snap, "") == "e_total"
    snap, _ = snap_at("value_first = 1\n" + "x = 2\n" * 5 + "value_second = 3\nprint(valu|)\n")
    assert forced_name(snap, "") == "e_second"


def test_short_words_and_known_words_are_left_to_the_model():
    snap, _ = snap_at("total_count = 1\nprint(to|\n")
    assert forced_name(snap, "x)") == ""  # two characters: the frequent name is nearly always wrong
    snap, _ = snap_at("total = 1\ntotal_count = 2\nprint(total|\n")
    assert forced_name(snap, ")") == ""  # `total` is a name the file uses: the model ended it there
    snap, _ = snap_at("print(zzy|\n")
    assert forced_name(snap, "x)") == ""  # nothing continues `zzy`


def test_other_languages_use_their_file_names_only():
    snap, _ = snap_at("let parsedValue = 1;\nconsole.log(parsedV|);\n", language="javascript")
    assert forced_name(snap, "x") == "alue"
    snap, _ = snap_at("console.log(isinst|);\n", language="javascript")
    assert forced_name(snap, "") == ""  # Python's built-ins are not JavaScript's


TEXT = ("def handle(request_payload_value):\n    checked = request_payload_value\n"
        "    return checked\n\n\nresult = handle(request_pay|)\n")


def test_the_server_shows_the_known_name_and_the_model_writes_on(tiny_model):
    engine = Engine.load(str(tiny_model), device="cpu", dtype="float32")
    on = ServerConfig(drafts="off")
    snap, doc = snap_at(TEXT, on)
    got = answer(engine, own_drafts(snap, doc, on))
    assert got.source == "name" and got.ran_model
    assert got.edit is not None and got.edit.text.startswith("load_value")
    assert got.stats is not None and got.stats.forwards >= 1

    off = ServerConfig(drafts="off", names=False)
    snap, doc = snap_at(TEXT, off)
    plain = answer(engine, own_drafts(snap, doc, off))
    assert plain.source != "name"
    assert plain.edit is None or not plain.edit.text.startswith("load_value")


def test_without_a_model_the_known_name_is_shown_alone():
    only = ServerConfig(drafts="only")
    snap, doc = snap_at("try:\n    import yaml\nexcept FileNo|\n", only)
    got = answer(None, own_drafts(snap, doc, only))
    assert got.source == "name" and not got.ran_model
    assert got.edit is not None and got.edit.text == "tFoundError"
    off = ServerConfig(drafts="only", names=False)
    snap, doc = snap_at("try:\n    import yaml\nexcept FileNo|\n", off)
    assert answer(None, own_drafts(snap, doc, off)).edit is None  # no draft: nothing to show


def test_inside_a_string_names_stay_out_of_the_prose():
    only = ServerConfig(drafts="only")
    snap, doc = snap_at('format_value = 1\n\n\ndef f():\n    """Return the forma|"""\n', only)
    assert snap.in_string
    assert answer(None, own_drafts(snap, doc, only)).source != "name"


def test_names_are_read_only_within_a_bounded_slice_around_the_cursor():
    from redraft.server.core.names import SCAN_CHARS
    near = "far_away_name = 1\n" + "# " + "y" * 100 + "\n"
    snap, _ = snap_at(near + "print(far_a|)\n")
    assert forced_name(snap, "") == "way_name"
    far = "far_away_name = 1\n" + "# " + "y" * (SCAN_CHARS + 10) + "\n"  # one line wider than the slice
    snap, _ = snap_at(far + "print(far_a|)\n")
    assert forced_name(snap, "") == ""
