package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// startProgress shows, on w, how far a mode has got until the returned
// function is called. On a terminal the line is rewritten in place several
// times a second; otherwise a line is printed every second, so logs stay
// short.
func startProgress(w io.Writer, mode string, demand int, r *modeResult) (stop func()) {
	if w == nil {
		return func() {}
	}
	tty := isTerminal(w)
	every := time.Second
	if tty {
		every = 100 * time.Millisecond
	}
	line := func() string {
		return fmt.Sprintf("%-10s %4d/%d orders accepted  %d sold-out answers  %d fenced  %d lock lost",
			mode, r.accepted.Load(), demand, r.soldOut.Load(), r.fenced.Load(), r.lockLost.Load())
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if tty {
					fmt.Fprintf(w, "\r%s", line())
				} else {
					fmt.Fprintln(w, line())
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		if tty {
			fmt.Fprintf(w, "\r%s\n", line())
		} else {
			fmt.Fprintln(w, line())
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
