"""The engine's prompt format: what serving and training both render."""

from redraft.engine import prompt


def test_history_renders_events_oldest_first_and_closes_the_block():
    out = prompt.render_history([("x = 1", "x = 2"), ("", "import os\n")])
    assert out == "<|history|>-x = 1\n+x = 2\n<|history|>+import os\n<|file_sep|>"


def test_history_skips_blank_events_and_is_empty_without_any():
    assert prompt.render_history([]) == ""
    assert prompt.render_history([("  \n", "\n\t")]) == ""
    assert prompt.render_history([(" ", ""), ("a", "b")]) == "<|history|>-a\n+b\n<|file_sep|>"


def test_history_shows_at_most_event_lines_of_each_side():
    removed = "".join(f"old{i}\n" for i in range(10))
    added = "".join(f"new{i}\n" for i in range(3))
    out = prompt.render_history([(removed, added)])
    shown = out.removeprefix(prompt.HISTORY).removesuffix(prompt.FILE_SEP).splitlines()
    assert prompt.EVENT_LINES == 6
    assert shown == [f"-old{i}" for i in range(6)] + ["+new0", "+new1", "+new2"]


def test_definition_puts_the_path_on_the_separator_line():
    assert prompt.render_definition("pkg/a.py", "def f():\n    pass\n") == "<|file_sep|>pkg/a.py\ndef f():\n    pass\n"


def test_the_shipped_models_read_this_format():
    import json
    from redraft.engine.checkpoint import SHIPPED, SHIPPED_DIR
    for name in SHIPPED:
        cfg = json.loads((SHIPPED_DIR / name / "config.json").read_text())
        assert cfg["layout"] == prompt.LAYOUT and cfg["segment_tokens"] == prompt.SEGMENT_TOKENS
        tok = json.loads((SHIPPED_DIR / name / "tokenizer.json").read_text())
        specials = {t["content"] for t in tok["added_tokens"]}
        assert set(prompt.SPECIAL_TOKENS) <= specials
