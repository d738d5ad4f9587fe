//go:build !unix

package devserver

import (
	"errors"
	"os"
	"syscall"
)

// No SIGSTOP or SIGCONT here: Pause and Resume report an error.
var sigStop, sigCont os.Signal

func sysProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(p *os.Process) { _ = p.Kill() }

// errNoLocks: the system has no file locks here, so no directory is ever
// found stale.
var errNoLocks = errors.New("no file locks")

func tryLock(*os.File) error { return errNoLocks }
