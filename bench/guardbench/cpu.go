package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuTimes is CPU time (user+system) used by this process and by the local
// database and Redis servers, read from /proc. The servers' figures are
// zero where /proc is unavailable, and include work done for other clients
// of the same servers (other programs and tests using them at the time).
type cpuTimes struct {
	self, mysqld, redis cpuTime
	idle, total         cpuTime // whole machine, from /proc/stat
}

// idlePct is the share of the machine's CPU time that stayed idle.
func (c cpuTimes) idlePct() float64 {
	if c.total == 0 {
		return 0
	}
	return 100 * float64(c.idle) / float64(c.total)
}

type cpuTime time.Duration

func (c cpuTime) perOp(ops int) float64 {
	if ops == 0 {
		return 0
	}
	return float64(time.Duration(c).Microseconds()) / float64(ops)
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{a.self - b.self, a.mysqld - b.mysqld, a.redis - b.redis, a.idle - b.idle, a.total - b.total}
}

func (a cpuTimes) add(b cpuTimes) cpuTimes {
	return cpuTimes{a.self + b.self, a.mysqld + b.mysqld, a.redis + b.redis, a.idle + b.idle, a.total + b.total}
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times on Linux.
const clockTick = 100

// readCPU reads the CPU times; the Redis server is the redis-server process
// whose command line names redisPort.
func readCPU(redisPort string) cpuTimes {
	var c cpuTimes
	c.self = procCPU("self")
	c.idle, c.total = machineCPU()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "mysqld", "mariadbd":
			c.mysqld += procCPU(filepath.Base(d))
		case "redis-server":
			if cmd, _ := os.ReadFile(filepath.Join(d, "cmdline")); strings.Contains(string(cmd), ":"+redisPort) {
				c.redis += procCPU(filepath.Base(d))
			}
		}
	}
	return c
}

// procCPU returns utime+stime of process pid ("self" for this one).
func procCPU(pid string) cpuTime {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command name, field 2, may contain spaces; fields after it are
	// numbered from 3. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return cpuTime(time.Duration(u+st) * time.Second / clockTick)
}

// machineCPU returns the idle (idle+iowait) and total CPU time of all the
// machine's cores.
func machineCPU() (idle, total cpuTime) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	var sum int64
	for i, x := range f[1:] {
		v, _ := strconv.ParseInt(x, 10, 64)
		sum += v
		if i == 3 || i == 4 {
			idle += cpuTime(time.Duration(v) * time.Second / clockTick)
		}
	}
	return idle, cpuTime(time.Duration(sum) * time.Second / clockTick)
}
