"""A request without a `language` (Zed's FIM providers send none) is read in the language its
file's path or its text shows, and then goes the LSP server's way: a draft that breaks the
parse is not shown. An explicit `language` always wins; text with no clue stays plain."""

from __future__ import annotations

import httpx
import pytest

from http_helpers import Running
from redraft.server.core.guess_language import from_text, infer
from redraft.server.core.settings import ServerConfig
from redraft.server.http.app import build_app
from redraft.server.http.engine import language_of
from redraft.server.http.templates import Params

# Drafts only, names off: what is shown is the buffer's draft after post-processing, whatever
# the model would say (as in tests/server/core/test_postprocess_errors.py).
DRAFTS_ONLY = ServerConfig(drafts="only", names=False, max_time=60_000)

# As in textwrap.TextWrapper._wrap_chunks. At `n = len(inde` the buffer's draft is the rest of
# the `if` line above, colon and all: valid as plain text, a syntax error in Python.
BEFORE = '''class Wrapper:
    def wrap(self, chunks):
        lines = []
        if self.max_lines is not None:
            if self.max_lines > 1:
                indent = self.subsequent_indent
            else:
                indent = self.initial_indent
            if len(indent) + len(self.placeholder.lstrip()) > self.width:
                raise ValueError("placeholder too large for max width")
        chunks.reverse()
        while chunks:
            cur_line = []
            n = len(inde'''
AFTER = "\n            chunks.pop()\n        return lines\n"
COPIED = "nt) + len(self.placeholder.lstrip()) > self.width:"

# The same shape with nothing that says which language it is.
PLAIN_BEFORE = "notes\nn = len(indent) + 1 > width:\nitems\nm = len(inde"
PLAIN_DRAFT = "nt) + 1 > width:"


@pytest.fixture(scope="module")
def url(inference):
    server = Running(build_app(inference, DRAFTS_ONLY))
    yield server.url
    server.stop()


def ask(url: str, route: str, prefix: str, suffix: str, header: str = "", **extra) -> tuple[str, str]:
    """(the text shown, the language Server-Timing names) for a Zed-shaped request: a qwen FIM
    prompt (after `header`, a repository-level header when given), no `language` unless `extra` adds one."""
    prompt = f"{header}<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
    if route == "/api/generate":
        body = {"model": "redraft", "prompt": prompt, "raw": True, "stream": False, "options": {"num_predict": 64}}
    else:
        body = {"model": "redraft", "prompt": prompt, "max_tokens": 64}
    r = httpx.post(url + route, json=body | extra, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    text = out["response"] if route == "/api/generate" else out["choices"][0]["text"]
    metrics = dict(m.strip().split(";", 1) for m in r.headers["server-timing"].split(","))
    return text, metrics.get("language", "").removeprefix("desc=")


ROUTES = ["/v1/completions", "/v1/fim/completions", "/api/generate"]


# -- over HTTP ------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ROUTES)
def test_python_text_without_a_language_gets_pythons_parse_check(url, route):
    assert ask(url, route, BEFORE, AFTER, language="plaintext") == (COPIED, "plaintext")  # the draft, unchecked
    assert ask(url, route, BEFORE, AFTER) == ("", "python")  # inferred: the colon breaks the parse


@pytest.mark.parametrize("route", ROUTES)
def test_a_python_path_in_the_prompt_gets_pythons_parse_check(url, route):
    # Nothing in this text says Python; the file the prompt's header names does.
    header = "<|file_sep|>src/wrap.py\n"
    assert ask(url, "/v1/completions", PLAIN_BEFORE, "\n") == (PLAIN_DRAFT, "plaintext")
    assert ask(url, route, PLAIN_BEFORE, "\n", header=header) == ("", "python")
    # A file whose extension no grammar reads stays plain, whatever its text looks like.
    assert ask(url, route, BEFORE, AFTER, header="<|file_sep|>notes.md\n") == (COPIED, "plaintext")


def test_an_explicit_language_wins_over_what_the_text_shows(url):
    # Read as JavaScript, the Python text is broken already and the draft adds no error to it:
    # JavaScript's check ran and kept the draft that Python's drops.
    assert ask(url, "/v1/completions", BEFORE, AFTER, language="javascript") == (COPIED, "javascript")
    assert ask(url, "/v1/completions", PLAIN_BEFORE, "\n", language="python") == ("", "python")
    header = "<|file_sep|>src/wrap.py\n"
    assert ask(url, "/v1/completions", BEFORE, AFTER, header=header, language="plaintext")[1] == "python", \
        "an id no grammar reads falls back to the path's extension, as over LSP"


def test_text_with_no_clue_stays_plain(url):
    for route in ROUTES:
        assert ask(url, route, PLAIN_BEFORE, "\n") == (PLAIN_DRAFT, "plaintext")


def test_a_mercury_edit_without_a_language_is_read_by_its_path(url):
    prompt = ("<|current_file_content|>\ncurrent_file_path: src/calc.go\npackage calc\n\n"
              "<|code_to_edit|>\nfunc add(a, b int) int {\n\treturn a + <|cursor|>b\n}\n<|/code_to_edit|>\n"
              "<|/current_file_content|>\n")
    r = httpx.post(url + "/v1/edit/completions", json={"messages": [{"role": "user", "content": prompt}]},
                   timeout=60)
    assert r.status_code == 200 and r.headers["server-timing"].startswith("language;desc=go, engine;dur=")


# -- the inference itself --------------------------------------------------------------------


@pytest.mark.parametrize("language, text", [
    ("python", "import os\n\n\ndef add(a, b):\n    return "),
    ("python", "class Point:\n    def norm(self):\n        return self.x"),
    ("python", "#!/usr/bin/env python3\nprint("),
    ("go", "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tx := 1\n\tfmt.Println("),
    ("rust", "use std::io;\n\nfn main() {\n    let mut line = String::new();\n    io::stdin()"),
    ("rust", "impl Point {\n    pub fn norm(&self) -> f64 {\n        "),
    ("typescript", "interface Point {\n  x: number;\n  y: number;\n}\n\nexport function norm(p: Point) {\n  return "),
    ("javascript", "const fs = require('fs');\n\nfunction read(name) {\n  return fs.readFileSync("),
    ("javascript", "#!/usr/bin/env node\nconsole."),
    ("java", "package com.example;\n\nimport java.util.List;\n\npublic class A {\n  "),
    ("c", "#include <stdio.h>\n\nint main(void) {\n  printf("),
    ("cpp", "#include <vector>\n\nint main() {\n  std::vector<int> v;\n  "),
])
def test_the_text_shows_its_language(language, text):
    assert from_text(text) == language
    at = len(text) // 2  # the cursor anywhere: prefix and suffix are read together
    assert from_text(text[:at], text[at:]) == language


@pytest.mark.parametrize("text", [
    "",
    "Dear team,\nThe meeting is on Monday. Agenda: budget, hiring.\nRegards\n",
    "x = 1\ny = ",  # as much Python as Ruby or plain arithmetic
    "#!/bin/sh\nexit 0\n",  # a shell script: no grammar here
    "for each row: add it up:\n",  # one weak sign
    "def add(a, b):\n    return a + b\n\nfunc main() {\n}\npackage main\n",  # two languages, neither ahead
])
def test_text_with_no_clear_language_stays_plain(text):
    assert from_text(text) is None


def test_the_path_decides_before_the_text():
    python = "import os\n\n\ndef add(a, b):\n    return "
    assert infer("src/main.rs", python) == "rust"  # the same extension map the LSP server uses
    assert infer("C:\\work\\app.tsx", "") == "typescriptreact"
    assert infer("README.md", python) is None  # a named file no grammar reads: plain
    assert infer("bin/tool", "#!/usr/bin/env -S node --no-warnings\nx") == "javascript"  # no extension: the text
    assert infer("", python) == "python"


def test_only_a_request_without_a_language_is_inferred():
    python = "def add(a, b):\n    return "
    assert language_of(Params(), "", python, "\n") == "python"
    assert language_of(Params(language="go"), "", python, "\n") == "go"
    assert language_of(Params(language="lua"), "a.py", python, "\n") == "lua"  # named: never guessed over
    assert language_of(Params(), "", "hello there\n", "") == ""


def test_only_a_bounded_part_of_a_long_text_is_read():
    far = "def add(a, b):\n    return a + b\n"
    filler = "word " * 2000 + "\n"
    assert from_text(filler + far + filler) is None  # far from both the file's start and the cursor
    assert from_text(far + filler) == "python"  # at the file's start
    assert from_text(filler + far) == "python"  # near the cursor
