-- renew.lua: KEYS[1..n] lock keys, all in one hash slot (layout in lib_lock.lua)
--   ARGV[1] lease ms, ARGV[1+i] acquisition id held in KEYS[i]
-- => array of n integers: 1 renewed (lease reset to ARGV[1]), 0 not held
-- One call renews every lock a Locker holds in the slot.

--#include lib_lock.lua

local lease = tonumber(ARGV[1])
local out = {}
for i, lock in ipairs(KEYS) do
  local tok, ids = parse_lock(redis.call('GET', lock))
  if tok and has_id(ids, ARGV[i + 1]) then
    redis.call('PEXPIRE', lock, lease)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
