//go:build unix

package devserver

import (
	"errors"
	"os"
	"syscall"
)

var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT

// killGroup sends SIGKILL to p's process group (see sysProcAttr), falling
// back on p alone.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

// errNoLocks: the system has no file locks (see tryLock).
var errNoLocks = errors.New("no file locks")

// tryLock takes an exclusive lock on f without waiting; the kernel drops it
// when f is closed or the process ends.
func tryLock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
