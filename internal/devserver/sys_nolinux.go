//go:build unix && !linux

package devserver

import "syscall"

// sysProcAttr puts the server in a process group of its own, so that a
// terminal's Ctrl-C reaches only the program that manages it and a kill of
// the group ends anything the server started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
