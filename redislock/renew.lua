-- renew.lua: KEYS[1..n] lock keys, all in one hash slot (layout in lib_lock.lua)
--   ARGV[1] lease ms, ARGV[1+i] acquisition id held in KEYS[i]
-- => array of n integers: 1 renewed (lease at least ARGV[1] from now), 0 not held
-- One call renews every lock a Locker holds in the slot with that lease. A
-- lease is never shortened: reentrant acquisitions may have different leases,
-- and each holder counts on the one it renewed last.

--#include lib_lock.lua

local lease = tonumber(ARGV[1])
local out = {}
for i, lock in ipairs(KEYS) do
  local tok, ids = parse_lock(redis.call('GET', lock))
  if tok and has_id(ids, ARGV[i + 1]) then
    if redis.call('PTTL', lock) < lease then redis.call('PEXPIRE', lock, lease) end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
