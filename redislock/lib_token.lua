-- lib_token.lua: helpers for the token key, included by the scripts that mint
-- or read tokens; no KEYS or ARGV of its own.
--
-- token STRING  "<last minted token> <released entry> ..." ; PEXPIRE = token TTL
--               entry "<acqID>/<release time ms>", oldest first (see remember)
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

-- The largest token minus one: a stored token above it leaves none to mint.
local LAST_BUT_ONE = '18446744073709551614'

-- mint stores and returns max(stored+1, now in µs), or returns nil and
-- writes nothing when that would exceed 2^64-1.
local function mint(token_key, token_ttl, nowus)
  local stored, rel = read_token(token_key)
  local nxt
  if exact(stored) then
    nxt = string.format('%.0f', math.max(tonumber(stored) + 1, nowus))
  else
    if dec_gt(stored, LAST_BUT_ONE) then return nil end
    nxt = dec_inc(stored)
    local floor = string.format('%.0f', nowus)
    if dec_gt(floor, nxt) then nxt = floor end
  end
  redis.call('SET', token_key, nxt .. rel, 'PX', token_ttl)
  return nxt
end

-- Released acquisitions are remembered in the token key so that a retried
-- release of one is answered "released" rather than "not held": the newest
-- entries up to REL_KEEP bytes (at least 128 entries: ids are at most 31
-- bytes), and of those the ones younger than the caller's window. The record
-- is looked at only when an append takes it past a multiple of REL_STEP
-- bytes, so that most releases cost one APPEND (unlock.lua's fast path
-- repeats that test); it is then trimmed when it exceeds REL_MAX bytes or its
-- oldest entry is twice the window old, so that a busy key is not rewritten
-- on every release.
local REL_STEP, REL_MAX, REL_KEEP = 512, 8192, 6144

-- fix_released repairs and trims the token key after entry (released at
-- nowms) was appended to it, making len bytes: a key that was gone (expired,
-- evicted) is made well-formed, and old entries beyond what the rules above
-- keep are dropped. window is in ms.
local function fix_released(token_key, entry, len, token_ttl, nowms, window)
  if len == #entry then
    redis.call('SET', token_key, '0' .. entry, 'PX', token_ttl)
    return
  end
  if math.floor(len / REL_STEP) == math.floor((len - #entry) / REL_STEP) then return end
  if len <= REL_MAX then
    local first = string.match(redis.call('GETRANGE', token_key, 0, 99), '^%d+ [^ /]*/(%d+)')
    if first and tonumber(first) >= nowms - 2 * window then return end
  end
  local tok, rel = read_token(token_key)
  local start = 1
  if #rel > REL_KEEP then start = string.find(rel, ' ', #rel - REL_KEEP, true) end
  local cut = nowms - window
  while start <= #rel do
    local nxt = string.find(rel, ' ', start + 1, true) or #rel + 1
    local t = string.match(string.sub(rel, start, nxt - 1), '/(%d+)$')
    if t and tonumber(t) >= cut then break end
    start = nxt
  end
  redis.call('SET', token_key, tok .. string.sub(rel, start), 'KEEPTTL')
end

-- remember records that acquisition id was released now.
local function remember(token_key, id, token_ttl, window)
  local nowms = math.floor(now_us() / 1000)
  local entry = ' ' .. id .. '/' .. nowms
  fix_released(token_key, entry, redis.call('APPEND', token_key, entry), token_ttl, nowms, window)
end

local function was_released(token_key, id)
  local _, rel = read_token(token_key)
  return string.find(rel, ' ' .. id .. '/', 1, true) ~= nil
end
