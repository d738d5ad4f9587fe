package redislock

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Each script is one .lua file. A line "--#include a.lua b.lua" in it stands
// for those helper files, so that every script carries only the helpers it
// uses, and only after its fast path: Lua creates a function each time its
// definition runs, so helpers placed after a fast path's return cost that
// path nothing.
//
//go:embed *.lua
var luaFiles embed.FS

// The scripts are immutable after package initialisation; redis.Script only
// caches its own digest.
var (
	scriptAcquire = newScript("acquire.lua")
	scriptUnlock  = newScript("unlock.lua")
	scriptLeave   = newScript("leave.lua")
	scriptRenew   = newScript("renew.lua")
	scriptFloor   = newScript("floor.lua")
)

func newScript(name string) *redis.Script {
	return redis.NewScript(luaSource(name))
}

// luaSource returns the embedded file name with its includes expanded.
func luaSource(name string) string {
	b, err := luaFiles.ReadFile(name)
	if err != nil {
		panic("redislock: " + err.Error())
	}
	var out strings.Builder
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "--#include "); ok {
			for _, inc := range strings.Fields(rest) {
				out.WriteString(luaSource(inc))
			}
			continue
		}
		out.WriteString(line)
	}
	return out.String()
}

var (
	_ redis.Scripter = (*redis.Client)(nil)
	_ redis.Scripter = (*redis.ClusterClient)(nil)
)
