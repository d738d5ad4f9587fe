-- leave.lua: KEYS[1..6] lock, token, q, w, ch, rel (layout in lib_lock.lua, lib_token.lua,
--   lib_queue.lua, lib_release.lua)
--   ARGV[1] acquisition (waiter) id, ARGV[2] token TTL ms, ARGV[3] publish command,
--   ARGV[4] ms a release stays known to retries (absent: token TTL)
-- => 1 if a grant to this waiter was found and released, else 0
-- Idempotent: a waiter that gives up runs it on every exit path. A lock that
-- was handed to the waiter meanwhile goes on to the next live waiter, and a
-- free lock left behind by a dead holder is handed to the head.

--#include lib_lock.lua lib_token.lua lib_queue.lua lib_release.lua

local lock, token_key, q, w, ch, rel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, token_ttl, pubcmd = ARGV[1], tonumber(ARGV[2]), ARGV[3]
unqueue(q, w, id)
local v = redis.call('GET', lock)
local tok, ids = parse_lock(v)
if tok and has_id(ids, id) then
  release(lock, token_key, q, w, ch, rel, pubcmd, id, token_ttl, tonumber(ARGV[4]) or token_ttl, v)
  return 1
end
if not tok and redis.call('EXISTS', q) == 1 then
  hand_off(lock, token_key, q, w, ch, pubcmd, token_ttl, now_us())
end
tidy(q, w)
return 0
