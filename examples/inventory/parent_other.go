//go:build !linux

package main

// stopWithParent does nothing here: only Linux signals a program whose
// parent ended. Stop the program itself (Ctrl-C, SIGTERM) to stop the
// servers it started.
func stopWithParent() error { return nil }
