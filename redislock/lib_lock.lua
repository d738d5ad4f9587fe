-- lib_lock.lua: helpers for the lock value, included by the scripts that read
-- it; no KEYS or ARGV of its own.
--
-- lock  STRING  "<token>|<acqID> <acqID> ...|<owner>" (one id per live acquisition) ; PEXPIRE = lease

-- parse_lock splits a lock value into token, acquisition ids and owner (nil
-- when the lock is absent or malformed).
local function parse_lock(v)
  if not v then return nil end
  return string.match(v, '^(%d+)|([^|]*)|(.*)$')
end

local function has_id(ids, id)
  return ids == id or string.find(' ' .. ids .. ' ', ' ' .. id .. ' ', 1, true) ~= nil
end

local function remove_id(ids, id)
  if ids == id then return '' end
  local s = ' ' .. ids .. ' '
  local i = string.find(s, ' ' .. id .. ' ', 1, true)
  s = string.sub(s, 1, i) .. string.sub(s, i + #id + 2)
  return string.sub(s, 2, -2)
end
