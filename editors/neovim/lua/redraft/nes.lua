--- Next-edit suggestions: once edits settle, asks the server for Copilot's
--- `textDocument/copilotInlineEdit` at the cursor and shows each proposed edit where it
--- applies (a sign, the old text highlighted, the line as it would read at its end).
--- Jumping moves the cursor to the next one; accepting applies the one on the cursor line,
--- only while the buffer is still the version the edits were computed for (or the version
--- the last accepted edit made), then runs its command (`redraft.acceptEdit`).
---
--- Edit ranges are kept as extmarks, so accepting one edit leaves the others in place.

local api = vim.api
local client_of = require("redraft.client")
local state = require("redraft.state")

local M = {}

M.ns = api.nvim_create_namespace("redraft.nextedit")

---@class redraft.Edit
---@field raw table the server's edit: {text, range, textDocument, command}
---@field mark integer extmark over the range it replaces

---@class redraft.EditState
---@field config table
---@field timer uv.uv_timer_t
---@field seq integer
---@field req integer?
---@field edits redraft.Edit[]
---@field version integer? the buffer version the edits on screen apply to
---@field client_id integer?
---@field augroup integer
---@field clear fun(buf: integer, st: redraft.EditState): boolean

---@type table<integer, redraft.EditState>
local states = {}

--- Drops the hints; returns whether there were any.
local function clear(buf, st)
  local had = #st.edits > 0
  st.edits, st.version = {}, nil
  if api.nvim_buf_is_valid(buf) then
    api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  end
  return had
end

--- The edit's range now: row, col, end_row, end_col (bytes), or nil if its mark is gone.
local function where(buf, e)
  local m = api.nvim_buf_get_extmark_by_id(buf, M.ns, e.mark, { details = true })
  if not m or m[1] == nil then
    return nil
  end
  return m[1], m[2], m[3].end_row or m[1], m[3].end_col or m[2]
end

--- The line as it reads once `e` is applied (for a single-line edit), for the hint.
local function preview(buf, row, col, end_row, end_col, text)
  if row ~= end_row or text:find("\n") then
    return text
  end
  local line = client_of.line(buf, row)
  return vim.trim(line:sub(1, col) .. text .. line:sub(end_col + 1))
end

local function show(buf, st, client, raws)
  clear(buf, st)
  local enc = client.offset_encoding
  for _, raw in ipairs(raws) do
    local r = raw.range
    local row, end_row = r.start.line, r["end"].line
    if row < api.nvim_buf_line_count(buf) and end_row < api.nvim_buf_line_count(buf) then
      local col = client_of.byte_col(client_of.line(buf, row), r.start.character, enc)
      local end_col = client_of.byte_col(client_of.line(buf, end_row), r["end"].character, enc)
      local mark = api.nvim_buf_set_extmark(buf, M.ns, row, col, {
        end_row = end_row,
        end_col = end_col,
        hl_group = "RedraftEditOld",
        sign_text = st.config.next_edit.sign or nil,
        sign_hl_group = "RedraftEditSign",
        virt_text = { { "  → " .. preview(buf, row, col, end_row, end_col, raw.text), "RedraftEditNew" } },
        virt_text_pos = "eol",
        right_gravity = false,
        end_right_gravity = true,
        priority = 150,
      })
      st.edits[#st.edits + 1] = { raw = raw, mark = mark }
    end
  end
  if #st.edits == 0 then
    return
  end
  st.version, st.client_id = client_of.version(buf), client.id
  for _, e in ipairs(st.edits) do
    client_of.notify(client, "textDocument/didShowInlineEdit", { item = e.raw })
  end
end

--- Asks for the next edits now (cancelling the request in flight).
---@param buf integer
function M.request(buf)
  local st, client = state.begin(states, buf)
  if not st then
    return
  end
  local row, col = client_of.cursor(buf)
  local uri = vim.uri_from_bufnr(buf)
  -- The request flushes pending changes first, so this is the version the server sees.
  local version = client_of.version(buf)
  local params = {
    textDocument = { uri = uri, version = version },
    position = client_of.position(client, buf, row or 0, col or 0),
    context = { triggerKind = 2 },
  }
  state.send(states, buf, st, client, "textDocument/copilotInlineEdit", params, function(err, result)
    if err or type(result) ~= "table" or client_of.version(buf) ~= version then
      return -- the buffer moved on: these edits are for a version that is gone
    end
    local raws = {}
    for _, raw in ipairs(result.edits or {}) do
      local doc = raw.textDocument or {}
      if (doc.uri == nil or doc.uri == uri) and (doc.version == nil or doc.version == version)
        and type(raw.text) == "string" and type(raw.range) == "table" then
        raws[#raws + 1] = raw
      end
    end
    if #raws > 0 then
      show(buf, st, client, raws)
    elseif st.version ~= version then
      clear(buf, st) -- keep hints left by an accept (same version) when the server has no more
    end
  end)
end

--- The buffer's state while its hints are on screen (they are for the buffer's version), or nil.
---@param buf integer
---@return redraft.EditState?
local function on_screen(buf)
  local st = states[buf]
  if st ~= nil and #st.edits > 0 and st.version == client_of.version(buf) then
    return st
  end
  return nil
end

---@param buf integer
---@return boolean
function M.visible(buf)
  return on_screen(buf) ~= nil
end

--- The edits on screen, nearest first: {text, range = {row, col, end_row, end_col} (0-based, bytes), item}.
---@param buf integer
function M.current(buf)
  local st = on_screen(buf)
  if not st then
    return {}
  end
  local out = {}
  for _, e in ipairs(st.edits) do
    local row, col, end_row, end_col = where(buf, e)
    if row then
      out[#out + 1] = { text = e.raw.text, range = { row, col, end_row, end_col }, item = e.raw }
    end
  end
  return out
end

--- Moves the cursor to the next edit after the cursor line (wrapping around).
---@param buf integer
---@return boolean
function M.jump(buf)
  if not M.visible(buf) then
    return false
  end
  local cur = client_of.cursor(buf) or 0
  local targets = {}
  for _, e in ipairs(states[buf].edits) do
    local row, col = where(buf, e)
    if row then
      targets[#targets + 1] = { row, col }
    end
  end
  if #targets == 0 then
    return false
  end
  table.sort(targets, function(a, b)
    return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
  end)
  local target = targets[1]
  for _, t in ipairs(targets) do
    if t[1] > cur then
      target = t
      break
    end
  end
  api.nvim_win_set_cursor(0, { target[1] + 1, target[2] })
  return true
end

--- The index of the edit on the cursor line, if any.
local function at_cursor(buf, st)
  local row, col = client_of.cursor(buf)
  local best, dist
  for i, e in ipairs(st.edits) do
    local r, c = where(buf, e)
    if r == row and (dist == nil or math.abs(c - col) < dist) then
      best, dist = i, math.abs(c - col)
    end
  end
  return best
end

---@param buf integer
---@return boolean
function M.on_target(buf)
  return M.visible(buf) and at_cursor(buf, states[buf]) ~= nil
end

--- Applies the edit on the cursor line, if the buffer is still the version it is for.
---@param buf integer
---@return boolean
function M.accept(buf)
  local st = on_screen(buf)
  local i = st and at_cursor(buf, st)
  if not i then
    return false
  end
  local e = table.remove(st.edits, i)
  local row, col, end_row, end_col = where(buf, e)
  api.nvim_buf_del_extmark(buf, M.ns, e.mark)
  if not row then
    return false
  end
  api.nvim_buf_set_text(buf, row, col, end_row, end_col, vim.split(e.raw.text, "\n", { plain = true }))
  api.nvim_win_set_cursor(0, { row + 1, col })
  st.version = client_of.version(buf) -- the others still apply: their marks moved with this edit
  if #st.edits == 0 then
    clear(buf, st)
  end
  local client = vim.lsp.get_client_by_id(st.client_id or -1)
  if client then
    client_of.exec(client, e.raw.command, buf)
  end
  return true
end

--- Removes the hints.
---@param buf integer
---@return boolean whether any were on screen
function M.dismiss(buf)
  return state.dismiss(states, buf)
end

local function on_change(buf)
  local st = states[buf]
  if not st then
    return
  end
  if #st.edits > 0 and st.version ~= client_of.version(buf) then
    clear(buf, st) -- the user changed the buffer: the hints were for the version before
  end
  st.timer:stop()
  st.timer:start(st.config.next_edit.delay, 0, vim.schedule_wrap(function()
    if states[buf] == st and api.nvim_buf_is_valid(buf) then
      M.request(buf)
    end
  end))
end

---@param buf integer
---@param client vim.lsp.Client
---@param config table
function M.attach(buf, client, config)
  state.attach(states, "nextedit", buf, config, { edits = {} }, clear, { "TextChanged", "TextChangedI" }, on_change)
end

---@param buf integer
function M.detach(buf)
  state.forget(states, buf)
end

return M
