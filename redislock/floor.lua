-- floor.lua: KEYS[1] token STRING (layout in lib_token.lua)
--   ARGV[1] floor (decimal), ARGV[2] token TTL ms
-- => the stored token after the call: max(stored, floor), as a decimal string

--#include lib_token.lua

local stored = read_token(KEYS[1])
if dec_gt(ARGV[1], stored) then stored = ARGV[1] end
redis.call('SET', KEYS[1], stored, 'PX', tonumber(ARGV[2]))
return stored
