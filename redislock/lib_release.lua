-- lib_release.lua: release(), shared by unlock.lua and leave.lua, and the
-- record of released acquisitions; it uses lib_lock.lua, lib_token.lua and
-- lib_queue.lua.
--
-- rel   LIST    acqID, ... : the last released acquisitions, oldest first; at most
--               REL_KEEP + REL_SLACK entries; PEXPIRE >= the longest window of the releases in it
--
-- A retried release of an acquisition in rel is answered "released" rather
-- than "not held". Recording a release costs an RPUSH and a PEXPIRE whatever
-- the traffic of the key, so that no script's cost grows with it; only a
-- retry, which is rare, scans the record. The record keeps the last REL_KEEP
-- releases at least (it is trimmed back to them every REL_SLACK releases),
-- and expires once the longest window of the releases in it has passed.
-- unlock.lua's fast path repeats remember.

local REL_KEEP, REL_SLACK = 128, 32

-- remember records that acquisition id was released, to be remembered for
-- window ms at least.
local function remember(rel, id, window)
  local n = redis.call('RPUSH', rel, id)
  if n == 1 then
    redis.call('PEXPIRE', rel, window)
  else
    redis.call('PEXPIRE', rel, window, 'GT')
    if n > REL_KEEP + REL_SLACK then redis.call('LTRIM', rel, -REL_KEEP, -1) end
  end
end

local function was_released(rel, id)
  return redis.call('LPOS', rel, id) ~= false
end

-- release drops acquisition id; when it was the last one the lock goes to the
-- next live waiter. It returns 1 if released now, 2 if released by an
-- earlier call (a retry whose first call applied), 0 if not held.
-- window (ms) is how long the release must be remembered for a retry to be
-- answered 1. v is the lock's value when the caller has read it already
-- (false: absent), nil otherwise; queued likewise whether q exists.
local function release(lock, token_key, q, w, ch, rel, pubcmd, id, token_ttl, window, v, queued)
  if v == nil then v = redis.call('GET', lock) end
  local tok, ids, owner = parse_lock(v)
  if not tok or not has_id(ids, id) then
    if was_released(rel, id) then return 2 end
    return 0
  end
  remember(rel, id, window)
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
