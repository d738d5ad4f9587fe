-- unlock.lua: KEYS[1..5] lock, token, q, w, ch (layout in lib_lock.lua, lib_token.lua, lib_queue.lua)
--   ARGV[1] acquisition id, ARGV[2] token TTL ms, ARGV[3] publish command
-- => 1 released (now, or by an earlier call with the same id), 0 not held
-- Releasing the last acquisition hands the lock to the first live waiter.
-- The fast path (the only acquisition, nobody queued) comes first and
-- returns before the helpers of the other cases are even defined.
local lock, token_key, q, w, ch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
local v = redis.call('GET', lock)
local appended, queued
if v and string.match(v, '^%d+|([^|]*)|') == id then
  queued = redis.call('EXISTS', q) == 1
  if not queued then
    redis.call('DEL', lock)
    -- Remember the release so that a retry is answered 1, not 0.
    appended = redis.call('APPEND', token_key, ' ' .. id)
    if appended > #id + 1 and appended <= 600 then return 1 end
  end
end

--#include lib_lock.lua lib_token.lua lib_queue.lua lib_release.lua

if appended then -- released above; the token key needs repair or trimming
  fix_released(token_key, id, appended, tonumber(ARGV[2]))
  return 1
end
return release(lock, token_key, q, w, ch, ARGV[3], id, tonumber(ARGV[2]), v, queued)
