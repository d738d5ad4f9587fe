-- acquire.lua: KEYS[1..6] lock, token, q, w, ch, rel (layout in lib_lock.lua, lib_token.lua, lib_queue.lua;
--   rel is not used)
--   ARGV[1] acquisition id, ARGV[2] owner, ARGV[3] lease ms, ARGV[4] token TTL ms,
--   ARGV[5] waiter timeout ms, ARGV[6] hand-off lease ms,
--   ARGV[7] "1" = try only, "2" = first call of a waiting Lock, "0" = a later one,
--   ARGV[8] publish command (PUBLISH or SPUBLISH)
-- => {1, token, lease ms left}          granted (new, reentrant, or handed over earlier)
--    {0, "", ms, head[, seq]}           not granted; ms = holder's lease left (-1 unknown),
--                                       head = 1 when this waiter is first in the queue,
--                                       seq = its queue sequence (absent for TryLock)
--    {-1, "", -1}                       not granted and out of the queue: the stored token
--                                       is 2^64-1, no larger one can be minted
-- A waiter calls it again on every re-check: that call is also its heartbeat.
-- Every call is idempotent: applied twice (a client retrying a request whose
-- reply was lost), it has the outcome of one call, and a queued waiter keeps
-- its place.
-- The fast paths (free lock, nobody queued, stored token below 2^53; a new
-- waiter joining the queue of a held lock) come first and return before the
-- helpers of the other cases are even defined.
local lock, token_key, q, w, ch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, owner = ARGV[1], ARGV[2]
local held = redis.call('GET', lock)
if not held and redis.call('EXISTS', q) == 0 then
  local stored = string.match(redis.call('GET', token_key) or '', '^%d*')
  if #stored < 16 or (#stored == 16 and stored < '9007199254740992') then
    local t = redis.call('TIME')
    local tok = string.format('%.0f', math.max((tonumber(stored) or 0) + 1, t[1] * 1000000 + t[2]))
    redis.call('SET', token_key, tok, 'PX', ARGV[4])
    redis.call('SET', lock, tok .. '|' .. id .. '|' .. owner, 'PX', ARGV[3])
    return {1, tok, tonumber(ARGV[3])}
  end
elseif held and ARGV[7] == '2' then
  -- The first call of a waiting Lock, on a lock another owner holds: the
  -- caller's id is new, so it joins the back of the queue, unless this is
  -- the same request applied again (a client retries a request whose reply
  -- it lost), which keeps the place it took and only refreshes the
  -- heartbeat. Dead entries ahead of it are left to the next hand-off or
  -- re-check.
  local holder = string.match(held, '^%d+|[^|]*|(.*)$')
  if holder and holder ~= owner then
    local t = redis.call('TIME')
    local nowus = t[1] * 1000000 + t[2]
    local entry = (math.floor(nowus / 1000) + tonumber(ARGV[5])) .. ':' .. ARGV[6] .. ':' .. owner
    local seq, head = redis.call('ZSCORE', q, id), false
    if seq then
      seq, head = tonumber(seq), redis.call('ZRANGE', q, 0, 0)[1] == id
    else
      local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
      seq, head = nowus, not last[1]
      if last[2] and tonumber(last[2]) >= seq then seq = tonumber(last[2]) + 1 end
      redis.call('ZADD', q, seq, id)
    end
    redis.call('HSET', w, id, entry)
    -- Only the first waiter uses the holder's lease left (it re-checks when
    -- the lease ends); the others are told -1, unknown.
    if head then return {0, '', redis.call('PTTL', lock), 1, seq} end
    return {0, '', -1, 0, seq}
  end
end

--#include lib_lock.lua lib_token.lua lib_queue.lua

local lease, token_ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local try, pubcmd = ARGV[7] == '1', ARGV[8]

-- heartbeat refreshes the caller's queue entry, if it has one, before anything
-- prunes the queue: a waiter that is calling is alive and keeps its place.
local function heartbeat(nowms)
  local seq = redis.call('ZSCORE', q, id)
  if seq then
    redis.call('HSET', w, id, (nowms + tonumber(ARGV[5])) .. ':' .. ARGV[6] .. ':' .. owner)
  end
  return seq
end

local function enqueue(nowus)
  local nowms = math.floor(nowus / 1000)
  local seq = heartbeat(nowms)
  live_head(q, w, nowms)
  if not seq then
    seq = nowus
    local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) >= seq then seq = tonumber(last[2]) + 1 end
    redis.call('ZADD', q, seq, id)
    redis.call('HSET', w, id, (nowms + tonumber(ARGV[5])) .. ':' .. ARGV[6] .. ':' .. owner)
  end
  local head = redis.call('ZRANGE', q, 0, 0)[1] == id and 1 or 0
  return {0, '', redis.call('PTTL', lock), head, tonumber(seq)}
end

-- reenter adds an acquisition for the owner already holding the lock.
local function reenter(tok, ids)
  local v = tok .. '|' .. ids .. ' ' .. id .. '|' .. owner
  local pttl = redis.call('PTTL', lock)
  if pttl < lease then
    redis.call('SET', lock, v, 'PX', lease)
    pttl = lease
  else
    redis.call('SET', lock, v, 'KEEPTTL')
  end
  unqueue(q, w, id)
  return {1, tok, pttl}
end

-- overflow takes the caller out of the queue: no token is left to grant it.
local function overflow()
  unqueue(q, w, id)
  return {-1, '', -1}
end

local tok, ids, holder = parse_lock(held)
if tok then
  if has_id(ids, id) then -- handed over to this waiter already
    unqueue(q, w, id)
    return {1, tok, redis.call('PTTL', lock)}
  end
  if holder == owner then return reenter(tok, ids) end
  if try then return {0, '', redis.call('PTTL', lock), 0} end
  return enqueue(now_us())
end

local nowus = now_us()
if redis.call('EXISTS', q) == 0 then
  tok = grant(lock, token_key, id, owner, lease, token_ttl, nowus)
  if not tok then return overflow() end
  return {1, tok, lease}
end
if not try then heartbeat(math.floor(nowus / 1000)) end
-- false (undetermined) grants nothing: a live waiter may be queued behind
-- the dead entries still to be swept.
local head = live_head(q, w, math.floor(nowus / 1000))
if head == nil or head == id then
  tok = grant(lock, token_key, id, owner, lease, token_ttl, nowus)
  if not tok then return overflow() end
  unqueue(q, w, id)
  return {1, tok, lease}
end
if head then
  -- The lock is free but someone else is first: its holder ended without
  -- unlocking. Pass it to the head now rather than waiting for the head's
  -- re-check; the head may be this caller's owner, which then reenters.
  local _, exhausted = hand_off(lock, token_key, q, w, ch, pubcmd, token_ttl, nowus)
  if exhausted then return overflow() end
  tok, ids, holder = parse_lock(redis.call('GET', lock))
  if holder == owner then return reenter(tok, ids) end
end
if try then return {0, '', redis.call('PTTL', lock), 0} end
return enqueue(nowus)
