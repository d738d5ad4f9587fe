//go:build !unix

package devserver

import (
	"os"
	"syscall"
)

// No SIGSTOP or SIGCONT here: Pause and Resume report an error.
var sigStop, sigCont os.Signal

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) { _ = p.Kill() }
