-- lib_queue.lua: helpers for the wait queue and for grants, included by the
-- scripts that change who holds a lock; they use lib_lock.lua and
-- lib_token.lua and read no KEYS or ARGV of their own. The scripts that
-- include it take KEYS lock, token, q, w, ch.
--
-- q     ZSET    waiterID -> FIFO sequence (server µs, strictly increasing); the only source of queue order
-- w     HASH    waiterID -> "<heartbeat deadline ms>:<hand-off lease ms>:<owner>"
-- ch    channel: "<waiterID> <token>" published on every hand-off

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

-- live_head drops dead or inconsistent entries from the head of the queue and
-- returns the first live waiter's id, hand-off lease and owner (nil if none).
local function live_head(q, w, nowms)
  for _ = 1, 1000 do
    local head = redis.call('ZRANGE', q, 0, 0)[1]
    if not head then
      redis.call('DEL', w)
      return nil
    end
    local deadline, lease, owner = parse_waiter(redis.call('HGET', w, head))
    if deadline and deadline >= nowms then return head, lease, owner end
    redis.call('ZREM', q, head)
    redis.call('HDEL', w, head)
  end
  return nil
end

-- grant gives the free (absent) lock to acquisition id and returns the token;
-- raw as for mint.
local function grant(lock, token_key, id, owner, lease, token_ttl, nowus, raw)
  local tok = mint(token_key, token_ttl, nowus, raw)
  redis.call('SET', lock, tok .. '|' .. id .. '|' .. owner, 'PX', lease)
  return tok
end

-- hand_off gives the free lock to the live head of the queue, if any, and
-- tells it on the lock's channel. It returns the head's id or nil.
local function hand_off(lock, token_key, q, w, ch, pubcmd, token_ttl, nowus)
  local head, lease, owner = live_head(q, w, math.floor(nowus / 1000))
  if not head then return nil end
  local tok = grant(lock, token_key, head, owner, lease, token_ttl, nowus)
  unqueue(q, w, head)
  redis.call(pubcmd, ch, head .. ' ' .. tok)
  return head
end
