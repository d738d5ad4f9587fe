-- lib.lua: helpers prepended to every other script of this package; it reads no
-- KEYS or ARGV of its own. Every script that includes it takes the same first
-- five KEYS: lock (STRING), token (STRING), q (ZSET), w (HASH), ch (channel name).
--
-- lock  STRING  "<token>|<acqID> <acqID> ...|<owner>" (one id per live acquisition) ; PEXPIRE = lease
-- token STRING  "<last minted token> <released acqID> ..." (oldest first, a few hundred
--               bytes at most) ; PEXPIRE = token TTL
-- q     ZSET    waiterID -> FIFO sequence (server µs, strictly increasing); the only source of queue order
-- w     HASH    waiterID -> "<heartbeat deadline ms>:<hand-off lease ms>:<owner>"
--
-- Tokens are decimal strings compared by length then bytes, because a floor
-- raised from outside may exceed the 2^53 that Lua numbers represent exactly.
-- The fast paths (free lock, nobody queued) are kept to a handful of calls.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function dec_gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

local function dec_inc(s)
  local i = #s
  local out = ''
  while i > 0 do
    local d = string.byte(s, i) - 48
    if d < 9 then
      return string.sub(s, 1, i - 1) .. string.char(d + 49) .. out
    end
    out = '0' .. out
    i = i - 1
  end
  return '1' .. out
end

-- split_token splits a token key value into the stored token and the released
-- list (" id id ..." or "").
local function split_token(v)
  if not v then return '0', '' end
  local tok, rel = string.match(v, '^(%d+)(.*)$')
  if not tok then return '0', '' end
  return tok, rel
end

local function read_token(token_key)
  return split_token(redis.call('GET', token_key))
end

-- mint stores and returns max(stored+1, now in µs). raw is the token key's
-- value when the caller has read it already, nil otherwise.
local function mint(token_key, token_ttl, nowus, raw)
  local stored, rel
  if raw == nil then stored, rel = read_token(token_key) else stored, rel = split_token(raw) end
  local nxt = dec_inc(stored)
  local floor = string.format('%.0f', nowus)
  if dec_gt(floor, nxt) then nxt = floor end
  redis.call('SET', token_key, nxt .. rel, 'PX', token_ttl)
  return nxt
end

-- remember records a released acquisition so that a retried release of it is
-- answered "released" rather than "not held". Only the newest ones are kept.
local function remember(token_key, id, token_ttl)
  local len = redis.call('APPEND', token_key, ' ' .. id)
  if len == #id + 1 then
    -- The token key was gone (expired, evicted): keep it well-formed.
    redis.call('SET', token_key, '0 ' .. id, 'PX', token_ttl)
  elseif len > 600 then
    local tok, rel = read_token(token_key)
    local cut = string.find(rel, ' ', #rel - 400, true)
    redis.call('SET', token_key, tok .. string.sub(rel, cut), 'PX', token_ttl)
  end
end

local function was_released(token_key, id)
  local _, rel = read_token(token_key)
  return string.find(rel .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end

-- parse_lock splits a lock value into token, acquisition ids and owner (nil
-- when the lock is absent or malformed).
local function parse_lock(v)
  if not v then return nil end
  return string.match(v, '^(%d+)|([^|]*)|(.*)$')
end

local function has_id(ids, id)
  return string.find(' ' .. ids .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end

local function remove_id(ids, id)
  local s = ' ' .. ids .. ' '
  local i = string.find(s, ' ' .. id .. ' ', 1, true)
  s = string.sub(s, 1, i) .. string.sub(s, i + #id + 2)
  return string.sub(s, 2, -2)
end

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

-- release drops acquisition id; when it was the last one the lock goes to the
-- next live waiter. It returns 1 if released now or before, 0 if not held.
local function release(lock, token_key, q, w, ch, pubcmd, id, token_ttl)
  local tok, ids, owner = parse_lock(redis.call('GET', lock))
  if not tok or not has_id(ids, id) then
    if was_released(token_key, id) then return 1 end
    return 0
  end
  remember(token_key, id, token_ttl)
  local rest = remove_id(ids, id)
  if rest ~= '' then
    redis.call('SET', lock, tok .. '|' .. rest .. '|' .. owner, 'KEEPTTL')
    return 1
  end
  redis.call('DEL', lock)
  if redis.call('EXISTS', q) == 1 then
    hand_off(lock, token_key, q, w, ch, pubcmd, token_ttl, now_us())
  end
  return 1
end
