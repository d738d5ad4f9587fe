package devserver

import "syscall"

// sysProcAttr puts the server in a process group of its own, so that a
// terminal's Ctrl-C reaches only the program that manages it and a kill of
// the group ends anything the server started, and has the kernel kill it if
// that program dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
