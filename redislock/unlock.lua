-- unlock.lua: KEYS[1..6] lock, token, q, w, ch, rel (layout in lib_lock.lua, lib_token.lua,
--   lib_queue.lua, lib_release.lua)
--   ARGV[1] acquisition id, ARGV[2] token TTL ms, ARGV[3] publish command,
--   ARGV[4] ms a release stays known to retries (absent: token TTL),
--   ARGV[5] the releasing Locker's id (optional)
-- => 1 released now, 2 released by an earlier call with the same id (whose
--    reply was lost: if it handed the lock to a waiter of the caller's
--    Locker, that waiter was not told), 0 not held;
--    "<waiter id> <token>" released now and handed to a waiter of the Locker
--    ARGV[5] names, which the script did not tell: the caller must
-- Releasing the last acquisition hands the lock to the first live waiter.
-- The fast paths (the only acquisition, and nobody queued or a live first
-- waiter) come first and return before the helpers of the other cases are
-- even defined; they repeat what remember and hand_off do.
local lock, token_key, q, w, ch, rel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id = ARGV[1]
local v = redis.call('GET', lock)
local released = false
if v and string.match(v, '^%d+|([^|]*)|') == id then
  local window = tonumber(ARGV[4]) or tonumber(ARGV[2])
  local n = redis.call('RPUSH', rel, id)
  if n == 1 then
    redis.call('PEXPIRE', rel, window)
  else
    redis.call('PEXPIRE', rel, window, 'GT')
    if n > 160 then redis.call('LTRIM', rel, -128, -1) end -- REL_KEEP, REL_SLACK
  end
  local heads = redis.call('ZRANGE', q, 0, 1)
  if #heads == 0 then
    redis.call('DEL', lock)
    return 1
  end
  local head = heads[1]
  local deadline, lease, owner = string.match(redis.call('HGET', w, head) or '', '^(%d+):(%d+):(.*)$')
  local t = redis.call('TIME')
  local nowus = t[1] * 1000000 + t[2]
  local stored = string.match(redis.call('GET', token_key) or '', '^%d*')
  if deadline and tonumber(deadline) >= math.floor(nowus / 1000)
      and (#stored < 16 or (#stored == 16 and stored < '9007199254740992')) then
    local tok = string.format('%.0f', math.max((tonumber(stored) or 0) + 1, nowus))
    redis.call('SET', token_key, tok, 'PX', ARGV[2])
    redis.call('SET', lock, tok .. '|' .. head .. '|' .. owner, 'PX', lease)
    redis.call('ZREM', q, head)
    if #heads == 1 then redis.call('DEL', w) else redis.call('HDEL', w, head) end
    local to = string.match(head, '^[^.]*')
    if to == ARGV[5] then return head .. ' ' .. tok end
    redis.call(ARGV[3], ch .. ':' .. to, head .. ' ' .. tok)
    return 1
  end
  -- A dead first waiter or a token near 2^64: the general hand-off.
  redis.call('DEL', lock)
  released = true
end

--#include lib_lock.lua lib_token.lua lib_queue.lua lib_release.lua

local token_ttl = tonumber(ARGV[2])
if released then
  hand_off(lock, token_key, q, w, ch, ARGV[3], token_ttl, now_us())
  return 1
end
return release(lock, token_key, q, w, ch, rel, ARGV[3], id, token_ttl, tonumber(ARGV[4]) or token_ttl, v)
