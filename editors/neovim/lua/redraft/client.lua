--- The redraft LSP client as the other modules see it: finding it for a buffer, requests,
--- notifications and commands (the same calls on Neovim 0.10 and 0.11+), and columns
--- converted between the buffer's bytes and the client's position encoding (UTF-16 for
--- redraft). It knows nothing of ghost text or next edits.

local api = vim.api

local M = {}

M.NAME = "redraft"

local HAS_011 = vim.fn.has("nvim-0.11") == 1

--- The redraft client attached to `buf`, or nil.
---@param buf integer
---@return vim.lsp.Client?
function M.get(buf)
  return vim.lsp.get_clients({ bufnr = buf, name = M.NAME })[1]
end

--- Sends a request; returns its id (or nil). The handler gets (err, result).
---@return integer?
function M.request(client, method, params, handler, buf)
  local ok, id
  if HAS_011 then
    ok, id = client:request(method, params, handler, buf)
  else
    ok, id = client.request(method, params, handler, buf)
  end
  return ok and id or nil
end

--- Cancels request `id` unless it is known to be answered already (a cancel then is noise the
--- server has to ignore).
function M.cancel(client, id)
  if id == nil then
    return
  end
  local req = client.requests and client.requests[id]
  if client.requests and not (req and req.type == "pending") then
    return
  end
  if HAS_011 then
    client:cancel_request(id)
  else
    client.cancel_request(id)
  end
end

function M.notify(client, method, params)
  if HAS_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

--- Runs an item's command (`redraft.accept`, `redraft.acceptEdit`) on the server.
---@param command lsp.Command?
function M.exec(client, command, buf)
  if type(command) ~= "table" or type(command.command) ~= "string" then
    return
  end
  if HAS_011 then
    client:exec_cmd(command, { bufnr = buf })
  else
    M.request(client, "workspace/executeCommand",
      { command = command.command, arguments = command.arguments }, function() end, buf)
  end
end

--- The version the client last sent for `buf` (its changedtick on 0.11).
---@param buf integer
---@return integer
function M.version(buf)
  return vim.lsp.util.buf_versions[buf] or api.nvim_buf_get_changedtick(buf)
end

--- Byte column of `col`, a column in `encoding` units, in `line` (clamped to the line).
---@param line string
---@param col integer
---@param encoding string
---@return integer
function M.byte_col(line, col, encoding)
  if encoding == "utf-8" then
    return math.min(col, #line)
  end
  local ok, b = pcall(vim.str_byteindex, line, encoding, col, false)
  if ok then
    return b
  end
  ok, b = pcall(vim.str_byteindex, line, col, encoding == "utf-16") -- Neovim 0.10
  return ok and b or #line
end

--- Column in `encoding` units of byte column `byte` in `line`.
---@param line string
---@param byte integer
---@param encoding string
---@return integer
function M.unit_col(line, byte, encoding)
  byte = math.min(byte, #line)
  if encoding == "utf-8" then
    return byte
  end
  local ok, u = pcall(vim.str_utfindex, line, encoding, byte, false)
  if ok then
    return u
  end
  local u32, u16 = vim.str_utfindex(line, byte) -- Neovim 0.10
  return encoding == "utf-16" and u16 or u32
end

--- Length of `text` in `encoding` units.
function M.units(text, encoding)
  local n, lines = 0, vim.split(text, "\n", { plain = true })
  for i, s in ipairs(lines) do
    n = n + M.unit_col(s, #s, encoding) + (i < #lines and 1 or 0)
  end
  return n
end

--- The cursor of the window showing `buf` (0-based row, byte column), or nil.
---@param buf integer
---@return integer?, integer?
function M.cursor(buf)
  local win = api.nvim_get_current_win()
  if api.nvim_win_get_buf(win) ~= buf then
    return nil
  end
  local pos = api.nvim_win_get_cursor(win)
  return pos[1] - 1, pos[2]
end

---@param buf integer
---@param row integer 0-based
---@return string
function M.line(buf, row)
  return api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
end

--- The LSP position of byte column `col` in row `row` of `buf`, in the client's encoding.
---@param client vim.lsp.Client
---@param buf integer
---@param row integer 0-based
---@param col integer
---@return lsp.Position
function M.position(client, buf, row, col)
  return { line = row, character = M.unit_col(M.line(buf, row), col, client.offset_encoding) }
end

return M
