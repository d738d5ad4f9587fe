//go:build unix

package devserver

import (
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
