package main

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one INFO commandstats entry.
type cmdStat struct {
	calls int64
	usec  int64
}

// snapshot is what a run compares before and after its window.
type snapshot struct {
	at       time.Time
	sent     int64              // commands sent by the variant's clients
	client   time.Duration      // this process's CPU time
	redisCPU time.Duration      // the Redis server's CPU time (user + sys)
	cmds     map[string]cmdStat // INFO commandstats
}

func takeSnapshot(ctx context.Context, admin *redis.Client, sent int64) snapshot {
	s := snapshot{sent: sent, client: processCPU(), cmds: map[string]cmdStat{}}
	info, err := admin.Info(ctx, "cpu", "commandstats").Result()
	s.at = time.Now()
	if err != nil {
		return s
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			f, _ := strconv.ParseFloat(rest, 64)
			s.redisCPU += time.Duration(f * float64(time.Second))
		case strings.HasPrefix(name, "cmdstat_"):
			var st cmdStat
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.calls = n
				case "usec":
					st.usec = n
				}
			}
			s.cmds[strings.TrimPrefix(name, "cmdstat_")] = st
		}
	}
	return s
}

// cmdDelta is one command's share of a window.
type cmdDelta struct {
	name  string
	calls int64
	usec  int64
}

// commandDeltas returns the commands whose call count grew between a and b,
// most time first; the INFO calls of the snapshots themselves are left out.
func commandDeltas(a, b snapshot) []cmdDelta {
	var out []cmdDelta
	for name, st := range b.cmds {
		if name == "info" {
			continue
		}
		d := cmdDelta{name: name, calls: st.calls - a.cmds[name].calls, usec: st.usec - a.cmds[name].usec}
		if d.calls > 0 {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(x, y cmdDelta) int {
		if c := cmp.Compare(y.usec, x.usec); c != 0 {
			return c
		}
		return cmp.Compare(x.name, y.name)
	})
	return out
}

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
