-- lib_queue.lua: helpers for the wait queue and for grants, included by the
-- scripts that change who holds a lock; they use lib_lock.lua and
-- lib_token.lua and read no KEYS or ARGV of their own. The scripts that
-- include it take KEYS lock, token, q, w, ch.
--
-- q     ZSET    waiterID -> FIFO sequence (server µs, strictly increasing); the only source of queue order
-- w     HASH    waiterID -> "<heartbeat deadline ms>:<hand-off lease ms>:<owner>"
-- ch    channel prefix: "<waiterID> <token>" is published on every hand-off, on
--       ch .. ':' .. the waiter's Locker id (the part of waiterID before its first '.'),
--       so that a hand-off wakes only the process of the waiter it names

-- parse_waiter splits a w entry; nil when the entry is missing or malformed.
local function parse_waiter(v)
  if not v then return nil end
  local deadline, lease, owner = string.match(v, '^(%d+):(%d+):(.*)$')
  if not deadline then return nil end
  return tonumber(deadline), tonumber(lease), owner
end

-- tidy deletes w when the queue is empty, repairing any divergence.
local function tidy(q, w)
  if redis.call('EXISTS', q) == 0 then redis.call('DEL', w) end
end

-- unqueue removes a waiter from q and w.
local function unqueue(q, w, id)
  if redis.call('ZREM', q, id) == 1 then
    redis.call('HDEL', w, id)
    tidy(q, w)
  end
end

-- SWEEP is the most dead entries one call drops from the head of the queue,
-- so that a crowd of dead waiters never blocks the server for long.
local SWEEP = 1024

-- live_head drops dead or inconsistent entries from the head of the queue and
-- returns the first live waiter's id, hand-off lease and owner; nil when the
-- queue is empty, false when SWEEP dead entries were dropped and more may
-- follow. false means "unknown": nobody may be granted the lock then, since a
-- live waiter may still be queued behind them; later calls sweep on.
local function live_head(q, w, nowms)
  local n, swept = 1, 0 -- the head is usually live: look at one entry first
  while swept < SWEEP do
    local ids = redis.call('ZRANGE', q, 0, n - 1)
    if #ids == 0 then
      redis.call('DEL', w)
      return nil
    end
    local vals = redis.call('HMGET', w, unpack(ids))
    local dead = #ids
    local head, lease, owner
    for i = 1, #ids do
      local deadline, l, o = parse_waiter(vals[i])
      if deadline and deadline >= nowms then
        dead, head, lease, owner = i - 1, ids[i], l, o
        break
      end
    end
    if dead > 0 then
      redis.call('ZREM', q, unpack(ids, 1, dead))
      redis.call('HDEL', w, unpack(ids, 1, dead))
      swept = swept + dead
    end
    if head then return head, lease, owner end
    n = 128
  end
  return false
end

-- grant gives the free (absent) lock to acquisition id and returns the token,
-- or nil, changing nothing, when no token is left (see mint).
local function grant(lock, token_key, id, owner, lease, token_ttl, nowus)
  local tok = mint(token_key, token_ttl, nowus)
  if not tok then return nil end
  redis.call('SET', lock, tok .. '|' .. id .. '|' .. owner, 'PX', lease)
  return tok
end

-- hand_off gives the free lock to the live head of the queue, if any, and
-- tells it on its Locker's channel. It returns the head's id, or nil when
-- nobody was granted the lock; then the second result is true when that was
-- because no token is left. A head not granted for that reason stays queued
-- and learns it on its next call.
local function hand_off(lock, token_key, q, w, ch, pubcmd, token_ttl, nowus)
  local head, lease, owner = live_head(q, w, math.floor(nowus / 1000))
  if not head then return nil, false end
  local tok = grant(lock, token_key, head, owner, lease, token_ttl, nowus)
  if not tok then return nil, true end
  unqueue(q, w, head)
  redis.call(pubcmd, ch .. ':' .. string.match(head, '^[^.]*'), head .. ' ' .. tok)
  return head, false
end
