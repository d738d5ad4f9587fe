-- unlock.lua: KEYS[1..5] lock, token, q, w, ch (layout in lib_lock.lua, lib_token.lua, lib_queue.lua)
--   ARGV[1] acquisition id, ARGV[2] token TTL ms, ARGV[3] publish command,
--   ARGV[4] ms a release stays known to retries (absent: as long as kept)
-- => 1 released (now, or by an earlier call with the same id), 0 not held
-- Releasing the last acquisition hands the lock to the first live waiter.
-- The fast path (the only acquisition, nobody queued) comes first and
-- returns before the helpers of the other cases are even defined.
local lock, token_key, q, w, ch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
local v = redis.call('GET', lock)
local appended, entry, nowms, queued
if v and string.match(v, '^%d+|([^|]*)|') == id then
  queued = redis.call('EXISTS', q) == 1
  if not queued then
    redis.call('DEL', lock)
    -- Remember the release so that a retry is answered 1, not 0. The record
    -- needs a look only when it grows past a multiple of 512 bytes
    -- (REL_STEP in lib_token.lua) or the key was gone.
    local t = redis.call('TIME')
    nowms = t[1] * 1000 + math.floor(t[2] / 1000)
    entry = ' ' .. id .. '/' .. nowms
    appended = redis.call('APPEND', token_key, entry)
    if appended > #entry and math.floor(appended / 512) == math.floor((appended - #entry) / 512) then
      return 1
    end
  end
end

--#include lib_lock.lua lib_token.lua lib_queue.lua lib_release.lua

local token_ttl = tonumber(ARGV[2])
local window = tonumber(ARGV[4]) or token_ttl
if appended then -- released above; the token key needs repair or trimming
  fix_released(token_key, entry, appended, token_ttl, nowms, window)
  return 1
end
return release(lock, token_key, q, w, ch, ARGV[3], id, token_ttl, window, v, queued)
