--- Ghost text through Neovim's own `vim.lsp.inline_completion` (0.12+): it requests, draws
--- and accepts whole items (running the item's command); this file adds what it lacks —
--- accepting a line or a word (inserted here, then didPartiallyAcceptCompletion), dismissing,
--- asking now, and reading the suggestion on screen.

local api = vim.api
local client_of = require("redraft.client")
local ghost = require("redraft.ghost")

local M = {}

local function ic()
  return vim.lsp.inline_completion
end

--- Whether this Neovim has the built-in inline completion this module drives.
function M.available()
  local lib = ic()
  return lib ~= nil and type(lib.enable) == "function" and type(lib.get) == "function"
end

local function ns()
  return api.nvim_get_namespaces()["nvim.lsp.inline_completion"]
end

---@param buf integer
function M.attach(buf)
  pcall(ic().enable, true, { bufnr = buf })
end

---@param buf integer
function M.detach(buf)
  pcall(ic().enable, false, { bufnr = buf })
end

---@param buf integer
---@return boolean
function M.visible(buf)
  local id = ns()
  return id ~= nil and #api.nvim_buf_get_extmarks(buf, id, 0, -1, { limit = 1 }) > 0
end

--- The text on screen, from the built-in's extmark, and where it starts.
---@param buf integer
function M.current(buf)
  local id = ns()
  if id == nil then
    return nil
  end
  local m = api.nvim_buf_get_extmarks(buf, id, 0, -1, { details = true, limit = 1 })[1]
  if not m then
    return nil
  end
  local d, parts = m[4], {}
  local first = {}
  for _, chunk in ipairs(d.virt_text or {}) do
    first[#first + 1] = chunk[1]
  end
  parts[1] = table.concat(first)
  for _, vl in ipairs(d.virt_lines or {}) do
    local s = {}
    for _, chunk in ipairs(vl) do
      s[#s + 1] = chunk[1]
    end
    parts[#parts + 1] = table.concat(s)
  end
  local line = client_of.line(buf, m[2])
  local col = client_of.unit_col(line, m[3], "utf-16")
  local pos = { line = m[2], character = col }
  return { text = table.concat(parts, "\n"), range = { start = pos, ["end"] = pos } }
end

--- The built-in item's range as 0-based byte columns (it is a vim.Range on newer builds,
--- a {row, col, end_row, end_col} list on older ones), or the cursor when it has none.
local function byte_range(buf, item)
  local r = item.range
  if type(r) == "table" and type(r.to_extmark) == "function" then
    return r:to_extmark()
  elseif type(r) == "table" and r[1] ~= nil then
    return r[1], r[2], r[3], r[4]
  end
  local row, col = client_of.cursor(buf)
  return row, col, row, col
end

--- Inserts a line or a word of the built-in's item at the cursor.
local function partial(buf, item, how)
  local text = item.insert_text
  text = type(text) == "table" and text.value or text
  local row, scol, erow, ecol = byte_range(buf, item)
  if type(text) ~= "string" or row == nil or row ~= erow then
    return
  end
  local line = client_of.line(buf, row)
  local v = ghost.view(buf, { row = row, before = line:sub(1, scol), after = line:sub(ecol + 1), text = text })
  if not v then
    return
  end
  local piece = ghost.piece(v.rest, how)
  if piece == "" then
    return
  end
  local lines = vim.split(piece, "\n", { plain = true })
  api.nvim_buf_set_text(buf, v.row, v.col, v.row, v.col, lines)
  api.nvim_win_set_cursor(0, { v.row + #lines, (#lines == 1 and v.col or 0) + #lines[#lines] })
  local client = vim.lsp.get_client_by_id(item.client_id)
  if client then
    client_of.notify(client, "textDocument/didPartiallyAcceptCompletion", {
      item = { insertText = text, command = item.command },
      acceptedLength = client_of.units(piece, client.offset_encoding),
    })
  end
end

---@param buf integer
---@param how string? "all" (default), "line" or "word"
---@return boolean
function M.accept(buf, how)
  if not M.visible(buf) then
    return false
  end
  if how == nil or how == "all" then
    return ic().get({ bufnr = buf }) ~= false
  end
  return ic().get({
    bufnr = buf,
    on_accept = function(item)
      partial(buf, item, how)
      return nil -- inserted here; the built-in applies nothing
    end,
  }) ~= false
end

---@param buf integer
---@return boolean
function M.dismiss(buf)
  local had = M.visible(buf)
  if had then -- no public dismiss: disabling and enabling again drops the item and its request
    M.detach(buf)
    M.attach(buf)
  end
  return had
end

--- Asks now: the built-in requests on cursor moves in insert mode (debounced).
---@param buf integer
function M.request(buf)
  api.nvim_exec_autocmds("CursorMovedI", { buffer = buf, modeline = false })
end

return M
