--- Per-buffer state of the modules that ask the server about a buffer while it is edited
--- (ghost text, next edits). Each module keeps a table of states keyed by buffer; a state
--- holds the options in force (`config`), a timer, the number of the newest request (`seq`),
--- the id of the one in flight (`req`), an autocommand group, and `clear(buf, st)`, the
--- module's own function that hides what it shows. This file knows which answer is still
--- wanted and how a buffer's state starts and ends; what is asked and shown is the modules'.

local api = vim.api
local client_of = require("redraft.client")

local M = {}

--- Runs `callback(buf)` on `events` in `buf`, in the state's autocommand group.
---@param st table
---@param buf integer
---@param events string|string[]
---@param callback fun(buf: integer)
function M.on(st, buf, events, callback)
  api.nvim_create_autocmd(events, {
    group = st.augroup,
    buffer = buf,
    callback = function()
      callback(buf) -- returns nothing: a true result would delete the autocommand
    end,
  })
end

--- A new state for `buf` in `states`: `fields` with `config`, a timer, `seq` 0, `clear` and the
--- autocommand group "redraft.<name>.<buf>", in which `on_event(buf)` runs on `events`.
--- Nil when the buffer has a state already.
---@param states table<integer, table>
---@param name string
---@param buf integer
---@param config table
---@param fields table
---@param clear fun(buf: integer, st: table): boolean hides what the module shows; whether it showed any
---@param events string[]
---@param on_event fun(buf: integer)
---@return table?
function M.attach(states, name, buf, config, fields, clear, events, on_event)
  if states[buf] then
    return nil
  end
  local st = fields
  st.augroup = api.nvim_create_augroup(("redraft.%s.%d"):format(name, buf), { clear = true })
  st.config, st.timer, st.seq, st.clear = config, assert(vim.uv.new_timer()), 0, clear
  states[buf] = st
  M.on(st, buf, events, on_event)
  return st
end

--- One buffer's state and client, ready for a new request: its timer stopped and the request
--- in flight cancelled. Nothing when the buffer has no state or no client.
---@param states table<integer, table>
---@param buf integer
function M.begin(states, buf)
  local st, client = states[buf], client_of.get(buf)
  if not st or not client then
    return nil
  end
  st.timer:stop()
  if st.req then
    client_of.cancel(client, st.req)
    st.req = nil
  end
  return st, client
end

--- Sends `method` as the buffer's newest request (its id kept in `st.req`); `on_result(err,
--- result)` runs only if no newer request and no dismissal came in the meantime.
---@param states table<integer, table>
---@param buf integer
---@param st table
---@param client vim.lsp.Client
---@param method string
---@param params table
---@param on_result fun(err: table?, result: any)
function M.send(states, buf, st, client, method, params, on_result)
  st.seq = st.seq + 1
  local seq = st.seq
  st.req = client_of.request(client, method, params, function(err, result)
    if states[buf] ~= st or st.seq ~= seq then
      return -- superseded (its cancellation answers here too)
    end
    st.req = nil
    on_result(err, result)
  end, buf)
end

--- Hides what the buffer shows and drops whatever is pending for it: the timer, and the
--- request in flight (cancelled; an answer that still comes is ignored).
---@param states table<integer, table>
---@param buf integer
---@return boolean whether anything was on screen
function M.dismiss(states, buf)
  local st = states[buf]
  if not st then
    return false
  end
  st.timer:stop()
  st.seq = st.seq + 1
  local client = client_of.get(buf)
  if st.req and client then
    client_of.cancel(client, st.req)
  end
  st.req = nil
  return st.clear(buf, st)
end

--- Drops one buffer's state: dismisses what it shows, stops its timer and removes its
--- autocommands.
---@param states table<integer, table>
---@param buf integer
function M.forget(states, buf)
  local st = states[buf]
  if not st then
    return
  end
  M.dismiss(states, buf)
  states[buf] = nil
  st.timer:close()
  pcall(api.nvim_del_augroup_by_id, st.augroup)
end

return M
