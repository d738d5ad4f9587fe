-- lib_token.lua: helpers for the token key, included by the scripts that mint
-- or read tokens; no KEYS or ARGV of its own.
--
-- token STRING  "<last minted token>" ; PEXPIRE = token TTL
--
-- Tokens are decimal strings compared by length then bytes, because a floor
-- raised from outside may exceed the 2^53 that Lua numbers represent exactly.
-- Below that (every token minted from the server time is) plain arithmetic
-- is exact and cheaper. Tokens never exceed 2^64-1: mint refuses to.

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

-- read_token returns the stored token, '0' when the key is absent or holds
-- no digits. Only the leading digits count, so that a value with anything
-- after them (an older layout kept released ids there) still reads right and
-- is rewritten as digits only by the next mint.
local function read_token(token_key)
  local v = redis.call('GET', token_key)
  if not v then return '0' end
  local tok = string.match(v, '^%d+')
  return tok or '0'
end

-- The largest token minus one: a stored token above it leaves none to mint.
local LAST_BUT_ONE = '18446744073709551614'

-- mint stores and returns max(stored+1, now in µs), or returns nil and
-- writes nothing when that would exceed 2^64-1.
local function mint(token_key, token_ttl, nowus)
  local stored = read_token(token_key)
  local nxt
  if exact(stored) then
    nxt = string.format('%.0f', math.max(tonumber(stored) + 1, nowus))
  else
    if dec_gt(stored, LAST_BUT_ONE) then return nil end
    nxt = dec_inc(stored)
    local floor = string.format('%.0f', nowus)
    if dec_gt(floor, nxt) then nxt = floor end
  end
  redis.call('SET', token_key, nxt, 'PX', token_ttl)
  return nxt
end
