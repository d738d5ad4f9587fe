package errs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

type codeError struct{ code int }

func (e *codeError) Error() string { return fmt.Sprintf("code %d", e.code) }

func TestJoin(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	std := errors.Join(io.EOF, errors.New("second\nline")) // a part that has newlines of its own
	for _, c := range []struct {
		name  string
		err   error
		msg   string
		finds []error
	}{
		{"none", Join(), "", nil},
		{"all nil", Join(nil, nil), "", nil},
		{"one", Join(nil, a), "a", []error{a}},
		{"two", Join(a, b), "a; b", []error{a, b}},
		{"nested", Join(a, Join(b, context.Canceled)), "a; b; context canceled", []error{a, b, context.Canceled}},
		{"wrapped", fmt.Errorf("op: %w", Join(a, &codeError{7})), "op: a; code 7", []error{a}},
		{"standard join inside", Join(a, std), "a; EOF; second; line", []error{a, io.EOF}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.msg == "" {
				if c.err != nil {
					t.Fatalf("Join = %v, want nil", c.err)
				}
				return
			}
			if got := c.err.Error(); got != c.msg {
				t.Errorf("message %q, want %q", got, c.msg)
			}
			if strings.ContainsAny(c.err.Error(), "\r\n") {
				t.Errorf("message %q has a line break", c.err)
			}
			for _, want := range c.finds {
				if !errors.Is(c.err, want) {
					t.Errorf("errors.Is(%q, %v) = false", c.err, want)
				}
			}
		})
	}
	var ce *codeError
	if !errors.As(Join(a, fmt.Errorf("x: %w", &codeError{3})), &ce) || ce.code != 3 {
		t.Fatal("errors.As does not find a joined part")
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain":             "plain",
		"a\nb":              "a; b",
		"a\r\nb\n\n  c  \n": "a; b; c",
		"\n":                "",
	} {
		if got := OneLine(in); got != want {
			t.Errorf("OneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
