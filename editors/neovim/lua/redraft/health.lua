--- `:checkhealth redraft`: Neovim's version, setup(), the server command, and the clients
--- attached (with the model the server has loaded).

local M = {}

function M.check()
  local h = vim.health
  h.start("redraft")

  local v = vim.version()
  local version = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.11") == 1 then
    h.ok("Neovim " .. version)
  elseif vim.fn.has("nvim-0.10") == 1 then
    h.warn("Neovim " .. version .. ": works, but 0.11+ is what redraft is tested with",
      { "upgrade Neovim to 0.11 or later" })
  else
    h.error("Neovim " .. version .. " is too old", { "redraft needs Neovim 0.10 or later (0.11+ recommended)" })
  end
  local builtin = require("redraft.builtin").available()
  local redraft = require("redraft")
  local config = redraft.config
  if builtin and (config == nil or config.builtin) then
    h.info("ghost text: Neovim's own vim.lsp.inline_completion")
  else
    h.info("ghost text: redraft's extmarks")
  end

  if config == nil then
    h.error("setup() has not been called", { 'call require("redraft").setup({}) in your config' })
    return
  end
  h.ok("setup() done")

  local cmd = config.cmd
  if type(cmd) == "function" then
    h.ok("server command: a function (e.g. vim.lsp.rpc.connect)")
  elseif type(cmd) == "table" and type(cmd[1]) == "string" then
    local path = vim.fn.exepath(cmd[1])
    if path ~= "" then
      h.ok(("server command found: %s (%s)"):format(table.concat(cmd, " "), path))
    else
      h.error(("server command not found: %s"):format(cmd[1]), {
        "install redraft (pip install -e . in the repository) into a Python environment on PATH",
        'or set cmd = { "/path/to/venv/bin/redraft", "serve" } in setup()',
      })
    end
  else
    h.error("cmd must be a list like { \"redraft\", \"serve\" }")
  end

  local clients = vim.lsp.get_clients({ name = "redraft" })
  if #clients == 0 then
    h.warn("no redraft client is running", {
      "open a file of one of these filetypes: " .. table.concat(config.filetypes, ", "),
      "see :RedraftLog for the server's output (the LSP log, " .. redraft.log_file() .. ")",
    })
    return
  end
  for _, client in ipairs(clients) do
    local bufs = {}
    for buf in pairs(client.attached_buffers or {}) do
      bufs[#bufs + 1] = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(buf), ":~:.")
    end
    local model = "?"
    local ok, res = pcall(function()
      if vim.fn.has("nvim-0.11") == 1 then
        return client:request_sync("redraft/stats", vim.empty_dict(), 2000)
      end
      return client.request_sync("redraft/stats", vim.empty_dict(), 2000)
    end)
    if ok and res and res.result then
      model = res.result.model_error and ("failed to load: " .. res.result.model_error)
        or tostring(res.result.model or "loading")
    end
    local msg = ("client %d attached to %d buffer(s)%s; model: %s"):format(client.id, #bufs,
      #bufs > 0 and (" (" .. table.concat(bufs, ", ") .. ")") or "", model)
    if #bufs > 0 then
      h.ok(msg)
    else
      h.warn(msg)
    end
  end
end

return M
