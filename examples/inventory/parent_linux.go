package main

import "syscall"

// stopWithParent has the kernel send this program SIGTERM when the process
// that started it ends. Under go run that process is the go command, which
// does not pass on the SIGTERM that a supervisor or timeout sends it: without
// this, the program and the servers it started would run on, orphaned. It
// then stops as on its own SIGTERM, stopping those servers.
func stopWithParent() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return errno
	}
	return nil
}
