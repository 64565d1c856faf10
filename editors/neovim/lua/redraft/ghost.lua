--- Ghost text on Neovim 0.11 (no built-in inline completion there): asks the server for
--- `textDocument/inlineCompletion` while the user types (debounced, the previous request
--- cancelled), draws the item as an extmark (`virt_text_pos = "inline"` for its first line,
--- `virt_lines` for the rest), and accepts all of it, a line or a word.
---
--- An item is kept as the text left of its range (`before`), the text right of it (`after`)
--- and its insert text; whatever the user types between them is checked against the
--- insert text, so a suggestion stays on screen while it is typed through and goes as soon
--- as the buffer stops matching it. What to suggest is the server's business, not this file's.

local api = vim.api
local client_of = require("redraft.client")
local state = require("redraft.state")

local M = {}

M.ns = api.nvim_create_namespace("redraft.ghost")

local TRIGGER_INVOKED, TRIGGER_AUTOMATIC = 1, 2

---@class redraft.Item
---@field raw table the server's InlineCompletionItem
---@field client_id integer
---@field row integer 0-based row of the range
---@field before string the line left of the range
---@field after string the line right of the range (kept)
---@field text string the insert text still to come (partial accepts consume it)
---@field accepted integer UTF-16 units accepted so far (didPartiallyAcceptCompletion)
---@field shown boolean didShowCompletion sent

---@class redraft.GhostState
---@field config table
---@field timer uv.uv_timer_t
---@field seq integer the newest request's number
---@field req integer? the in-flight request's id
---@field item redraft.Item?
---@field tick integer changedtick at the last event handled
---@field cur string cursor at the last event handled ("row:col")
---@field augroup integer
---@field clear fun(buf: integer, st: redraft.GhostState): boolean

---@type table<integer, redraft.GhostState>
local states = {}

--- Where the item stands against the buffer now: nil when it no longer matches (the cursor
--- left its line, or the user typed something else); else the text still to insert at the
--- cursor and the byte column up to which it replaces the line (`stop`: closers right of
--- the cursor that the item replaces end there).
---@param buf integer
---@param item redraft.Item
local function view(buf, item)
  local row, col = client_of.cursor(buf)
  if row == nil or row ~= item.row then
    return nil
  end
  local line = client_of.line(buf, row)
  local b, a = item.before, item.after
  if col < #b or line:sub(1, #b) ~= b then
    return nil
  end
  local stop = #line - #a
  if stop < col or (#a > 0 and line:sub(stop + 1) ~= a) then
    return nil
  end
  local typed = line:sub(#b + 1, col)
  if item.text:sub(1, #typed) ~= typed then
    return nil
  end
  local rest = item.text:sub(#typed + 1)
  if rest == "" then
    return nil
  end
  return { row = row, col = col, line = line, rest = rest, stop = stop }
end

--- The state and the view of the item on screen, or nil.
---@param buf integer
---@return redraft.GhostState?, table?
local function on_screen(buf)
  local st = states[buf]
  local v = st and st.item and view(buf, st.item)
  if v and #api.nvim_buf_get_extmarks(buf, M.ns, 0, -1, { limit = 1 }) > 0 then
    return st, v
  end
  return nil
end

local function hide(buf)
  if api.nvim_buf_is_valid(buf) then
    api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  end
end

--- Drops the item and hides it; returns whether there was one.
local function clear(buf, st)
  local had = st.item ~= nil
  st.item = nil
  hide(buf)
  return had
end

--- Splits `new` (the cursor row right of the cursor once accepted) into the pieces to draw
--- between the characters of `tail` (what the row shows right of the cursor now), so that the
--- row reads `new` on screen: the closers an item keeps stay where they are, the text goes
--- around them. `tail` must be a subsequence of `new`; it is matched from the end, so closers
--- pair with the last ones. Returns {byte offset into tail, text} pieces, or nil.
---@param new string
---@param tail string
---@return {[1]: integer, [2]: string}[]?
function M.interleave(new, tail)
  local nc, tc = vim.fn.split(new, "\\zs"), vim.fn.split(tail, "\\zs")
  local at, j = {}, #nc
  for i = #tc, 1, -1 do
    while j >= 1 and nc[j] ~= tc[i] do
      j = j - 1
    end
    if j < 1 then
      return nil
    end
    at[i], j = j, j - 1
  end
  local pieces, off, prev = {}, 0, 0
  for i = 1, #tc do
    local gap = table.concat(nc, "", prev + 1, at[i] - 1)
    if gap ~= "" then
      pieces[#pieces + 1] = { off, gap }
    end
    off, prev = off + #tc[i], at[i]
  end
  local last = table.concat(nc, "", prev + 1, #nc)
  if last ~= "" then
    pieces[#pieces + 1] = { off, last }
  end
  return pieces
end

--- Draws what accepting would give right of the cursor: the first line inline (around the
--- closers the buffer already shows after the cursor), the others as virtual lines below.
local function draw(buf, st, v)
  hide(buf)
  local hl = "RedraftGhost"
  local lines = vim.split(v.rest .. v.line:sub(v.stop + 1), "\n", { plain = true })
  local tail = v.line:sub(v.col + 1)
  local pieces = #lines == 1 and M.interleave(lines[1], tail) or { { 0, lines[1] } }
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], hl } }
  end
  if #virt_lines > 0 then
    api.nvim_buf_set_extmark(buf, M.ns, v.row, v.col, { virt_lines = virt_lines, priority = 200 })
  end
  for _, p in ipairs(pieces) do
    if p[2] ~= "" then
      api.nvim_buf_set_extmark(buf, M.ns, v.row, v.col + p[1], {
        virt_text = { { p[2], hl } },
        virt_text_pos = "inline",
        hl_mode = "combine",
        priority = 200,
      })
    end
  end
  local item = st.item
  if item and not item.shown then
    item.shown = true
    local client = vim.lsp.get_client_by_id(item.client_id)
    if client then
      client_of.notify(client, "textDocument/didShowCompletion", { item = item.raw })
    end
  end
end

--- Redraws the item against the buffer, or drops it; returns the view when it is on screen.
local function refresh(buf, st)
  local v = st.item and view(buf, st.item)
  if v then
    draw(buf, st, v)
    return v
  end
  clear(buf, st)
  return nil
end

--- Turns the server's item into one kept against the line it was asked for.
local function to_item(raw, client, row, line, col)
  local text = raw.insertText
  if type(text) == "table" then -- a snippet: shown and inserted as its plain text
    text = text.value
  end
  if type(text) ~= "string" or text == "" then
    return nil
  end
  local scol, ecol = col, col
  if raw.range then
    local s, e = raw.range.start, raw.range["end"]
    if s.line ~= row or e.line ~= row then
      return nil -- redraft's ranges lie on the cursor row; a multi-row range is not drawn
    end
    scol = client_of.byte_col(line, s.character, client.offset_encoding)
    ecol = client_of.byte_col(line, e.character, client.offset_encoding)
    if scol > col or ecol < col then
      return nil
    end
  end
  return {
    raw = raw,
    client_id = client.id,
    row = row,
    before = line:sub(1, scol),
    after = line:sub(ecol + 1),
    text = text,
    accepted = 0,
    shown = false,
  }
end

--- Asks for a completion at the cursor now (cancelling the one in flight).
---@param buf integer
---@param kind integer? trigger kind (1 invoked, 2 automatic)
function M.request(buf, kind)
  local st, client = state.begin(states, buf)
  if not st then
    return
  end
  local row, col = client_of.cursor(buf)
  if row == nil then
    return
  end
  local line = client_of.line(buf, row)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    position = client_of.position(client, buf, row, col),
    context = { triggerKind = kind or TRIGGER_AUTOMATIC },
  }
  state.send(states, buf, st, client, "textDocument/inlineCompletion", params, function(err, result)
    if err or type(result) ~= "table" then
      return
    end
    local items = result.items or result
    st.item = items[1] and to_item(items[1], client, row, line, col)
    refresh(buf, st)
  end)
end

local function schedule(buf, st)
  st.timer:stop()
  st.timer:start(st.config.debounce, 0, vim.schedule_wrap(function()
    if states[buf] == st and api.nvim_get_current_buf() == buf and api.nvim_get_mode().mode:sub(1, 1) == "i" then
      M.request(buf, TRIGGER_AUTOMATIC)
    end
  end))
end

--- Typing and cursor moves: keep the item while the buffer matches it, drop it when the
--- cursor moved without typing, and ask again once typing pauses.
local function on_event(buf)
  local st = states[buf]
  if not st then
    return
  end
  local row, col = client_of.cursor(buf)
  local tick, cur = api.nvim_buf_get_changedtick(buf), ("%s:%s"):format(row, col)
  if tick == st.tick and cur == st.cur then
    return -- TextChangedI and CursorMovedI for the same keystroke
  end
  local moved = tick == st.tick
  st.tick, st.cur = tick, cur
  if moved then
    clear(buf, st)
  else
    refresh(buf, st)
  end
  if st.config.auto_trigger then
    schedule(buf, st)
  end
end

--- Drops the suggestion and whatever is pending for it.
---@param buf integer
function M.dismiss(buf)
  return state.dismiss(states, buf)
end

---@param buf integer
---@return boolean
function M.visible(buf)
  return on_screen(buf) ~= nil
end

--- The suggestion on screen: `text` (what accepting inserts at the cursor), `range` (the LSP
--- range it replaces, in the client's encoding) and `item` (the server's item), or nil.
---@param buf integer
function M.current(buf)
  local st, v = on_screen(buf)
  if not st then
    return nil
  end
  local client = vim.lsp.get_client_by_id(st.item.client_id)
  local enc = client and client.offset_encoding or "utf-16"
  return {
    text = v.rest,
    range = {
      start = { line = v.row, character = client_of.unit_col(v.line, v.col, enc) },
      ["end"] = { line = v.row, character = client_of.unit_col(v.line, v.stop, enc) },
    },
    item = st.item.raw,
  }
end

--- The next piece of `rest` for a partial accept: "line" or "word".
---@param rest string
---@param how string
---@return string
function M.piece(rest, how)
  local nl = rest:match("^\n[ \t]*") or ""
  local r = rest:sub(#nl + 1)
  if how == "line" then
    return nl .. (r:match("^[^\n]*") or "")
  end
  return nl .. (r:match("^[ \t]*[%w_\128-\255]+") or r:match("^[ \t]*[^%w_%s\128-\255]+") or r:match("^[ \t]+") or "")
end

--- Accepts the suggestion on screen: "all" (the default), "line" or "word". Accepting all
--- replaces the item's range and runs its command (`redraft.accept`); a partial accept
--- inserts the piece at the cursor and sends didPartiallyAcceptCompletion.
---@param buf integer
---@param how string?
---@return boolean accepted
function M.accept(buf, how)
  how = how or "all"
  local st = states[buf]
  local v = st and st.item and view(buf, st.item)
  if not v then
    return false
  end
  local item = st.item
  local piece = how == "all" and v.rest or M.piece(v.rest, how)
  if piece == "" then
    return false
  end
  if piece == v.rest then
    how = "all"
  end
  local lines = vim.split(piece, "\n", { plain = true })
  api.nvim_buf_set_text(buf, v.row, v.col, v.row, how == "all" and v.stop or v.col, lines)
  local row = v.row + #lines - 1
  local col = (#lines == 1 and v.col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { row + 1, col })
  local client = vim.lsp.get_client_by_id(item.client_id)
  if how == "all" then
    clear(buf, st)
    if client then
      client_of.exec(client, item.raw.command, buf)
    end
    return true
  end
  local line = client_of.line(buf, row)
  item.accepted = item.accepted + client_of.units(piece, client and client.offset_encoding or "utf-16")
  item.row, item.before, item.text = row, line:sub(1, col), v.rest:sub(#piece + 1)
  refresh(buf, st)
  if client then
    client_of.notify(client, "textDocument/didPartiallyAcceptCompletion",
      { item = item.raw, acceptedLength = item.accepted })
  end
  return true
end

---@param buf integer
---@param client vim.lsp.Client
---@param config table
function M.attach(buf, client, config)
  local st = state.attach(states, "ghost", buf, config, { tick = -1, cur = "" }, clear,
    { "TextChangedI", "CursorMovedI", "TextChanged", "CursorMoved" }, on_event)
  if not st then
    return
  end
  state.on(st, buf, "InsertEnter", function()
    if st.config.auto_trigger then
      schedule(buf, st)
    end
  end)
  state.on(st, buf, { "InsertLeave", "BufLeave" }, M.dismiss)
end

---@param buf integer
function M.detach(buf)
  state.forget(states, buf)
end

M.TRIGGER_INVOKED = TRIGGER_INVOKED
M.view = view

return M
