package redislock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lib.lua
	libLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed unlock.lua
	unlockLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed renew.lua
	renewLua string
	//go:embed floor.lua
	floorLua string
)

// The scripts are immutable after package initialisation; redis.Script only
// caches its own digest.
var (
	scriptAcquire = redis.NewScript(libLua + acquireLua)
	scriptUnlock  = redis.NewScript(libLua + unlockLua)
	scriptLeave   = redis.NewScript(libLua + leaveLua)
	scriptRenew   = redis.NewScript(libLua + renewLua)
	scriptFloor   = redis.NewScript(libLua + floorLua)
)

var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
)
