--- redraft for Neovim: attaches `redraft serve` as a language server, shows its inline
--- completions as ghost text and its next-edit suggestions as hints, and maps the keys that
--- accept them. All the prediction logic lives in the server; this plugin only asks,
--- draws and applies.
---
---   require("redraft").setup({ init_options = { model = "/path/to/checkpoint" } })
---
--- `M.defaults` is the one table of options (README.md in this folder describes each).

local api = vim.api
local client_of = require("redraft.client")

local M = {}

M.defaults = {
  -- The server command: a list (argv), or a function as vim.lsp.rpc.connect() returns.
  cmd = { "redraft", "serve" },
  -- Filetypes to attach to (the languages the server parses; others work as plain text).
  filetypes = { "python", "javascript", "javascriptreact", "typescript", "typescriptreact",
    "go", "rust", "c", "cpp", "java" },
  -- Files that mark a project root (none found: the file is served on its own).
  root_markers = { ".git" },
  -- initializationOptions, the server's settings: model, device, dtype, drafts, maxLines,
  -- threshold, nextEdit, editMargin, enable, ... (root README, "The language server").
  init_options = {},
  -- Ask for a suggestion while typing in insert mode; false: only on trigger().
  auto_trigger = true,
  -- Milliseconds of quiet typing before asking.
  debounce = 40,
  -- On Neovim 0.12+, let vim.lsp.inline_completion request and draw the ghost text.
  builtin = true,
  next_edit = {
    enabled = true,
    delay = 400, -- milliseconds after the last change before asking for next edits
    sign = "»", -- sign beside a line with a proposed edit (false: none)
  },
  -- Keys (false turns one off). Insert-mode keys act only while a suggestion is on screen
  -- and normal-mode keys only while next-edit hints are; otherwise the key does what it
  -- did before (its earlier mapping, or Neovim's own).
  keymaps = {
    accept = "<Tab>", -- insert: accept the whole suggestion
    accept_line = "<S-Tab>", -- insert: accept its next line
    accept_word = "<C-Right>", -- insert: accept its next word
    dismiss = "<C-]>", -- insert: dismiss it
    edit_accept = "<Tab>", -- normal: jump to the next-edit hint; on its line, apply it
    edit_jump = false, -- normal: jump to the next hint only (e.g. "]r")
    edit_dismiss = "<Esc>", -- normal: hide the hints
  },
}

---@type table? the options in force, once setup() has run
M.config = nil

local ghost = require("redraft.ghost")
local builtin = require("redraft.builtin")
local nes = require("redraft.nes")

local group = api.nvim_create_augroup("redraft", { clear = true })

local function use_builtin()
  return M.config ~= nil and M.config.builtin and builtin.available()
end

--- The module that shows ghost text here: Neovim's own (0.12+) or ours.
local function display()
  return use_builtin() and builtin or ghost
end

-- Options --------------------------------------------------------------------------------

local CHECKS = {
  cmd = { "table", "function" },
  filetypes = "table",
  root_markers = "table",
  init_options = "table",
  auto_trigger = "boolean",
  debounce = "number",
  builtin = "boolean",
  next_edit = "table",
  keymaps = "table",
}

--- The defaults with `opts` over them; a bad value keeps its default, with one message.
local function merge(opts)
  local c = vim.deepcopy(M.defaults)
  local problems = {}
  for k, v in pairs(opts or {}) do
    local want = CHECKS[k]
    if want == nil then
      problems[#problems + 1] = ("unknown option %q"):format(k)
    elseif not vim.tbl_contains(type(want) == "table" and want or { want }, type(v)) then
      problems[#problems + 1] = ("option %q must be a %s"):format(k, type(want) == "table" and table.concat(want, " or ") or want)
    elseif (k == "next_edit" or k == "keymaps") then
      c[k] = vim.tbl_extend("force", c[k], v)
    else
      c[k] = v
    end
  end
  if c.debounce < 0 then
    problems[#problems + 1] = "option \"debounce\" must be >= 0"
    c.debounce = M.defaults.debounce
  end
  if #problems > 0 then
    vim.notify("redraft: " .. table.concat(problems, "; ") .. " (defaults kept)", vim.log.levels.WARN)
  end
  return c
end

local function highlights()
  api.nvim_set_hl(0, "RedraftGhost", { link = "Comment", default = true })
  api.nvim_set_hl(0, "RedraftEditOld", { link = "DiffDelete", default = true })
  api.nvim_set_hl(0, "RedraftEditNew", { link = "DiagnosticHint", default = true })
  api.nvim_set_hl(0, "RedraftEditSign", { link = "DiagnosticSignHint", default = true })
end

-- Public API -----------------------------------------------------------------------------

local function buf_of(buf)
  return (buf == nil or buf == 0) and api.nvim_get_current_buf() or buf
end

--- Asks for a suggestion at the cursor now. Ghost text belongs to the insert cursor (it goes
--- when insert mode ends, and the keys that accept it are insert-mode keys), so outside insert
--- mode this only says so.
---@param buf integer?
---@return boolean asked
function M.trigger(buf)
  buf = buf_of(buf)
  if api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    vim.notify("redraft: trigger() works in insert mode, where ghost text is shown; map it there, "
      .. "e.g. vim.keymap.set(\"i\", \"<M-]>\", \"<Cmd>Redraft trigger<CR>\")", vim.log.levels.INFO)
    return false
  end
  if use_builtin() then
    builtin.request(buf)
  else
    ghost.request(buf, ghost.TRIGGER_INVOKED)
  end
  return true
end

--- The suggestion on screen, or nil: `{ text, range, item }` — `text` is what accepting
--- inserts at the cursor, `range` the LSP range (UTF-16) it replaces, `item` the server's item.
---@param buf integer?
function M.current(buf)
  return display().current(buf_of(buf))
end

---@param buf integer?
function M.visible(buf)
  return display().visible(buf_of(buf))
end

--- Accepts the suggestion on screen, or its next line / word.
---@param how string? "all" (default), "line" or "word"
function M.accept(how, buf)
  return display().accept(buf_of(buf), how or "all")
end

function M.accept_line(buf)
  return M.accept("line", buf)
end

function M.accept_word(buf)
  return M.accept("word", buf)
end

function M.dismiss(buf)
  return display().dismiss(buf_of(buf))
end

--- The next-edit hints on screen: a list of `{ text, range = {row, col, end_row, end_col}, item }`
--- (0-based rows, byte columns).
function M.next_edits(buf)
  return nes.current(buf_of(buf))
end

--- Asks for next edits now.
function M.request_next_edits(buf)
  nes.request(buf_of(buf))
end

--- Moves the cursor to the next next-edit hint.
function M.jump_edit(buf)
  return nes.jump(buf_of(buf))
end

--- Applies the hint on the cursor line, or jumps to the next one when there is none there.
function M.accept_edit(buf)
  buf = buf_of(buf)
  return nes.accept(buf) or nes.jump(buf)
end

function M.dismiss_edits(buf)
  return nes.dismiss(buf_of(buf))
end

--- Calls `callback(stats)` with the server's `redraft/stats` (counters, latencies, model).
function M.stats(callback, buf)
  local client = client_of.get(buf_of(buf)) or vim.lsp.get_clients({ name = client_of.NAME })[1]
  if not client then
    return false
  end
  client_of.request(client, "redraft/stats", vim.empty_dict(), function(err, result)
    callback(not err and result or nil, err)
  end, buf_of(buf))
  return true
end

-- Keys -----------------------------------------------------------------------------------

local ACTIONS = {
  accept = { "i", M.visible, function() M.accept("all") end },
  accept_line = { "i", M.visible, function() M.accept("line") end },
  accept_word = { "i", M.visible, function() M.accept("word") end },
  dismiss = { "i", M.visible, function() M.dismiss() end },
  edit_accept = { "n", function(buf) return nes.visible(buf) end, function() M.accept_edit() end },
  edit_jump = { "n", function(buf) return nes.visible(buf) end, function() M.jump_edit() end },
  edit_dismiss = { "n", function(buf) return nes.visible(buf) end, function() M.dismiss_edits() end },
}

local fallbacks = {} ---@type function[] non-expr callbacks of mappings ours replaced

--- Runs a key's action (the expr mappings below return a <Cmd> calling this).
function M._key(name)
  ACTIONS[name][3]()
end

function M._fallback(i)
  fallbacks[i]()
end

--- What a key does when nothing of ours is on screen: its earlier mapping, or itself.
local function fallback_of(prev, lhs)
  if type(prev) ~= "table" or vim.tbl_isempty(prev) or (prev.desc or ""):find("^redraft") then
    return function() return lhs end
  end
  if prev.callback then
    if prev.expr == 1 then
      return function() return prev.callback() or "" end
    end
    fallbacks[#fallbacks + 1] = prev.callback
    local cmd = ("<Cmd>lua require('redraft')._fallback(%d)<CR>"):format(#fallbacks)
    return function() return cmd end
  end
  local rhs = prev.rhs or ""
  if prev.expr == 1 then
    return function() return api.nvim_eval(rhs) end
  end
  return function()
    api.nvim_feedkeys(api.nvim_replace_termcodes(rhs, true, true, true), prev.noremap == 1 and "ni" or "mi", false)
    return ""
  end
end

local function map_keys(buf)
  for name, lhs in pairs(M.config.keymaps) do
    local action = ACTIONS[name]
    if action and type(lhs) == "string" and lhs ~= "" then
      local mode, active = action[1], action[2]
      local fallback = fallback_of(vim.fn.maparg(lhs, mode, false, true), lhs)
      local cmd = ("<Cmd>lua require('redraft')._key(%q)<CR>"):format(name)
      vim.keymap.set(mode, lhs, function()
        if active(buf) then
          return cmd
        end
        return fallback()
      end, { buffer = buf, expr = true, silent = true, desc = "redraft: " .. name:gsub("_", " ") })
    end
  end
end

local function unmap_keys(buf)
  for name, lhs in pairs(M.config.keymaps) do
    if ACTIONS[name] and type(lhs) == "string" and lhs ~= "" then
      pcall(vim.keymap.del, ACTIONS[name][1], lhs, { buffer = buf })
    end
  end
end

-- Attaching ------------------------------------------------------------------------------

local attached = {} ---@type table<integer, boolean>

local function attach(buf, client)
  if attached[buf] then
    return
  end
  attached[buf] = true
  if use_builtin() then
    builtin.attach(buf)
  else
    ghost.attach(buf, client, M.config)
  end
  if M.config.next_edit.enabled then
    nes.attach(buf, client, M.config)
  end
  map_keys(buf)
end

local function detach(buf)
  if not attached[buf] then
    return
  end
  attached[buf] = nil
  ghost.detach(buf)
  if use_builtin() then
    builtin.detach(buf)
  end
  nes.detach(buf)
  if api.nvim_buf_is_valid(buf) then
    unmap_keys(buf)
  end
end

--- One server for the whole editor session: a buffer under a root the server does not know yet
--- joins the running client, and the root is added to its workspace folders (Neovim's default
--- starts a server, and a model, per project root).
---@param client vim.lsp.Client
---@param config vim.lsp.ClientConfig
---@return boolean
local function reuse_client(client, config)
  -- (0.10's is_stopped is a closure that ignores its argument; 0.11's is a method)
  if client.name ~= config.name or client.is_stopped(client) then
    return false
  end
  local dir = config.root_dir
  if type(dir) ~= "string" or dir == "" then
    return true
  end
  local uri = vim.uri_from_fname(dir)
  for _, folder in ipairs(client.workspace_folders or {}) do
    if folder.uri == uri then
      return true
    end
  end
  local added = { { uri = uri, name = dir } }
  client_of.notify(client, "workspace/didChangeWorkspaceFolders", { event = { added = added, removed = {} } })
  client.workspace_folders = vim.list_extend(client.workspace_folders or {}, added)
  return true
end

--- The client configuration (vim.lsp.config / vim.lsp.start).
local function server_config()
  local c = M.config
  return {
    name = client_of.NAME,
    cmd = c.cmd,
    filetypes = c.filetypes,
    root_markers = c.root_markers,
    reuse_client = reuse_client,
    -- An empty Lua table goes out as a JSON list; the server wants an object.
    init_options = next(c.init_options) == nil and vim.empty_dict() or c.init_options,
    -- redraft speaks UTF-16 columns; offering only UTF-16 keeps both sides on them.
    capabilities = { general = { positionEncodings = { "utf-16" } } },
  }
end

local warned = {} ---@type table<string, boolean> server commands already reported missing

--- Whether the server command can run. When it cannot, says so once per command: Neovim's
--- LSP client would only write it to its log, and the user would see nothing at all.
local function cmd_runs()
  local cmd = M.config.cmd
  if type(cmd) ~= "table" or type(cmd[1]) ~= "string" or vim.fn.executable(cmd[1]) == 1 then
    return true
  end
  if not warned[cmd[1]] then
    warned[cmd[1]] = true
    vim.notify(("redraft: the server command %q is not executable (not installed, or not on PATH); "
      .. "set cmd = { \"/path/to/venv/bin/redraft\", \"serve\" } in setup(). See :checkhealth redraft")
      :format(cmd[1]), vim.log.levels.WARN)
  end
  return false
end

local function start_per_buffer(buf)
  local cfg = server_config()
  cfg.root_dir = vim.fs.root(buf, cfg.root_markers) or vim.fn.getcwd()
  cfg.capabilities = vim.tbl_deep_extend("force", vim.lsp.protocol.make_client_capabilities(), cfg.capabilities)
  local reuse = cfg.reuse_client
  cfg.filetypes, cfg.root_markers, cfg.reuse_client = nil, nil, nil
  vim.lsp.start(cfg, { bufnr = buf, reuse_client = reuse })
end

local function subcommand(args)
  local sub = args.fargs[1] or "stats"
  if sub == "stats" then
    if not M.stats(function(stats, err)
      vim.notify(err and ("redraft: " .. tostring(err.message or err)) or vim.inspect(stats))
    end) then
      vim.notify("redraft: no server attached", vim.log.levels.WARN)
    end
  elseif sub == "trigger" then
    M.trigger()
  elseif sub == "dismiss" then
    M.dismiss()
    M.dismiss_edits()
  elseif sub == "toggle" then
    M.config.auto_trigger = not M.config.auto_trigger
    vim.notify("redraft: suggestions while typing " .. (M.config.auto_trigger and "on" or "off"))
  elseif sub == "nextedit" then
    M.request_next_edits()
  else
    vim.notify("redraft: unknown subcommand " .. sub, vim.log.levels.ERROR)
  end
end

--- The LSP client's log file (the server's stderr lands there too).
---@return string
function M.log_file()
  local log = vim.lsp.log
  return log and log.get_filename and log.get_filename() or vim.lsp.get_log_path()
end

--- Opens the LSP log in a new tab (`:RedraftLog`); plain Neovim has no `:LspLog`, which
--- comes with nvim-lspconfig.
local function open_log()
  vim.cmd.tabnew(vim.fn.fnameescape(M.log_file()))
end

--- Starts the client for the configured filetypes: Neovim's own vim.lsp.enable (0.11+), or
--- vim.lsp.start per buffer (0.10). A server command that cannot run is reported, once.
local function start()
  local native = vim.lsp.config ~= nil and vim.lsp.enable ~= nil
  if native then
    vim.lsp.config(client_of.NAME, server_config())
    vim.lsp.enable(client_of.NAME)
  end
  local function on_filetype(buf)
    if cmd_runs() and not native then
      start_per_buffer(buf)
    end
  end
  api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      on_filetype(args.buf)
    end,
  })
  for _, buf in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(buf) and vim.tbl_contains(M.config.filetypes, vim.bo[buf].filetype) then
      on_filetype(buf)
    end
  end
end

--- Starts redraft with `opts` over `M.defaults`.
---@param opts table?
function M.setup(opts)
  for buf in pairs(attached) do -- set up again: buffers attach again with the new options
    detach(buf)
  end
  M.config = merge(opts)
  highlights()
  api.nvim_clear_autocmds({ group = group })
  api.nvim_create_autocmd("ColorScheme", { group = group, callback = highlights })
  api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == client_of.NAME then
        attach(args.buf, client)
      end
    end,
  })
  api.nvim_create_autocmd("LspDetach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == client_of.NAME then
        detach(args.buf)
      end
    end,
  })
  api.nvim_create_user_command("Redraft", subcommand, {
    nargs = "?",
    complete = function() return { "stats", "trigger", "dismiss", "toggle", "nextedit" } end,
    desc = "redraft: stats | trigger | dismiss | toggle | nextedit",
  })
  api.nvim_create_user_command("RedraftLog", open_log, {
    desc = "redraft: open the LSP log (the server's output) in a new tab",
  })
  for _, client in ipairs(vim.lsp.get_clients({ name = client_of.NAME })) do
    for buf in pairs(client.attached_buffers or {}) do
      attach(buf, client)
    end
  end
  start()
end

return M
