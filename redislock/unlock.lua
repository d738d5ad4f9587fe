-- unlock.lua: KEYS[1..5] lock, token, q, w, ch (see lib.lua)
--   ARGV[1] acquisition id, ARGV[2] token TTL ms, ARGV[3] publish command
-- => 1 released (now, or by an earlier call with the same id), 0 not held
-- Releasing the last acquisition hands the lock to the first live waiter.
return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[1], tonumber(ARGV[2]))
