-- lib_token.lua: helpers for the token key, included by the scripts that mint
-- or read tokens; no KEYS or ARGV of its own.
--
-- token STRING  "<last minted token> <released acqID> ..." (oldest first, a few hundred
--               bytes at most) ; PEXPIRE = token TTL
--
-- Tokens are decimal strings compared by length then bytes, because a floor
-- raised from outside may exceed the 2^53 that Lua numbers represent exactly.
-- Below that (every token minted from the server time is) plain arithmetic
-- is exact and cheaper.

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function dec_gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end

-- exact tells whether decimal s is at most 2^53 - 1, so that s + 1 is exact
-- as a Lua number.
local function exact(s)
  return #s < 16 or (#s == 16 and s < '9007199254740992')
end

local function dec_inc(s)
  if exact(s) then return string.format('%.0f', tonumber(s) + 1) end
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
  local nxt
  if exact(stored) then
    nxt = string.format('%.0f', math.max(tonumber(stored) + 1, nowus))
  else
    nxt = dec_inc(stored)
    local floor = string.format('%.0f', nowus)
    if dec_gt(floor, nxt) then nxt = floor end
  end
  redis.call('SET', token_key, nxt .. rel, 'PX', token_ttl)
  return nxt
end

-- fix_released repairs the token key after id was appended to it, making
-- len bytes: a key that was gone (expired, evicted) is made well-formed, and
-- only the newest released ids are kept.
local function fix_released(token_key, id, len, token_ttl)
  if len == #id + 1 then
    redis.call('SET', token_key, '0 ' .. id, 'PX', token_ttl)
  elseif len > 600 then
    local tok, rel = read_token(token_key)
    local cut = string.find(rel, ' ', #rel - 400, true)
    redis.call('SET', token_key, tok .. string.sub(rel, cut), 'PX', token_ttl)
  end
end

-- remember records a released acquisition so that a retried release of it is
-- answered "released" rather than "not held". Only the newest ones are kept.
local function remember(token_key, id, token_ttl)
  fix_released(token_key, id, redis.call('APPEND', token_key, ' ' .. id), token_ttl)
end

local function was_released(token_key, id)
  local _, rel = read_token(token_key)
  return string.find(rel .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end
