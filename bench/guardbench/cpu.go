package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuTimes is CPU time (user+system) used by this process and by the
// database and Redis servers the benchmark talks to, read from /proc. A
// server's figure is zero when no local process listens on its port (or
// /proc is unavailable), and includes work done for other clients of the
// same server (other programs and tests using it at the time).
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

// servers are the local processes of the database and Redis servers, found
// by the port they listen on; a pid is empty when none was found.
type servers struct{ mysqld, redis string }

// findServers finds the processes listening on the ports of mysqlAddr and
// redisAddr.
func findServers(mysqlAddr, redisAddr string) servers {
	return servers{mysqld: listener(mysqlAddr), redis: listener(redisAddr)}
}

// readCPU reads the CPU times.
func readCPU(s servers) cpuTimes {
	var c cpuTimes
	c.self = procCPU("self")
	c.idle, c.total = machineCPU()
	if s.mysqld != "" {
		c.mysqld = procCPU(s.mysqld)
	}
	if s.redis != "" {
		c.redis = procCPU(s.redis)
	}
	return c
}

// listener returns the pid of the local process with a socket listening on
// addr's port, or "".
func listener(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return ""
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st ... inode (field 10)
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if v, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && v == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			return strings.Split(fd, "/")[2]
		}
	}
	return ""
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
