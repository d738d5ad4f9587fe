-- lib_release.lua: release(), shared by unlock.lua and leave.lua; it uses
-- lib_lock.lua, lib_token.lua and lib_queue.lua.

-- release drops acquisition id; when it was the last one the lock goes to the
-- next live waiter. It returns 1 if released now or before, 0 if not held.
-- window (ms) is how long the release must be remembered for a retry to be
-- answered 1. v is the lock's value when the caller has read it already
-- (false: absent), nil otherwise; queued likewise whether q exists.
local function release(lock, token_key, q, w, ch, pubcmd, id, token_ttl, window, v, queued)
  if v == nil then v = redis.call('GET', lock) end
  local tok, ids, owner = parse_lock(v)
  if not tok or not has_id(ids, id) then
    if was_released(token_key, id) then return 1 end
    return 0
  end
  remember(token_key, id, token_ttl, window)
  local rest = remove_id(ids, id)
  if rest ~= '' then
    redis.call('SET', lock, tok .. '|' .. rest .. '|' .. owner, 'KEEPTTL')
    return 1
  end
  redis.call('DEL', lock)
  if queued == nil then queued = redis.call('EXISTS', q) == 1 end
  if queued then
    hand_off(lock, token_key, q, w, ch, pubcmd, token_ttl, now_us())
  end
  return 1
end
