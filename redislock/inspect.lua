-- inspect.lua: KEYS[1..6] lock, token, q, w, ch, rel (layout in lib_lock.lua, lib_token.lua,
--   lib_queue.lua, lib_release.lua)
--   no ARGV
-- => {now µs, lock, token, queue, stray, released}
--    lock  = {} when free, else {value, lease ms left, token, acquisition ids, owner};
--            token, ids and owner are '' when the value is malformed
--    token = {} when the token key is absent, else {stored token, ms left}
--    queue = {{id, sequence, heartbeat deadline ms, hand-off lease ms, owner, w value}, ...}
--            in FIFO order; deadline, lease and owner are '' when the w entry is
--            missing or malformed
--    stray = number of w entries whose id is not in q
--    released = number of releases remembered for retried unlocks
-- Reads only, so that an operator sees one consistent state of the lock.

--#include lib_lock.lua lib_token.lua lib_queue.lua

local lock, token_key, q, w, rel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]

local held = {}
local v = redis.call('GET', lock)
if v then
  local tok, ids, owner = parse_lock(v)
  held = {v, redis.call('PTTL', lock), tok or '', ids or '', owner or ''}
end

local stored = {}
if redis.call('EXISTS', token_key) == 1 then
  stored = {read_token(token_key), redis.call('PTTL', token_key)}
end

local queue, known = {}, 0
local entries = redis.call('ZRANGE', q, 0, -1, 'WITHSCORES')
for i = 1, #entries, 2 do
  local id = entries[i]
  local raw = redis.call('HGET', w, id)
  if raw then known = known + 1 end
  local deadline, lease, owner = parse_waiter(raw)
  queue[#queue + 1] = {id, entries[i + 1], deadline and string.format('%.0f', deadline) or '',
    lease and string.format('%.0f', lease) or '', owner or '', raw or ''}
end

return {string.format('%.0f', now_us()), held, stored, queue, redis.call('HLEN', w) - known,
  redis.call('LLEN', rel)}
