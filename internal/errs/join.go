package errs

import "strings"

// Join returns an error wrapping the non-nil errors given, or nil when there
// are none. Like errors.Join, its Unwrap returns them all, so errors.Is and
// errors.As find each of them; unlike it, the message joins theirs with "; "
// and holds no newline, even when a part's own message has some (such as the
// standard library's joined errors), so that a log line stays one line.
func Join(errs ...error) error {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	e := &joined{errs: make([]error, 0, n)}
	for _, err := range errs {
		if err != nil {
			e.errs = append(e.errs, err)
		}
	}
	return e
}

type joined struct {
	errs []error
}

// Error joins the parts' messages with "; ", each on one line.
func (e *joined) Error() string {
	var b strings.Builder
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(OneLine(err.Error()))
	}
	return b.String()
}

// Unwrap returns the joined errors.
func (e *joined) Unwrap() []error { return e.errs }

// OneLine returns msg with each line break (and the blanks around it)
// replaced by "; ".
func OneLine(msg string) string {
	if !strings.ContainsAny(msg, "\r\n") {
		return msg
	}
	lines := strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' })
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}
