package guard

import (
	"database/sql"
	"database/sql/driver"
	"math"
	"strings"
	"testing"
	"time"
)

type status string

// intValuer's Value is a Go int, which database/sql refuses.
type intValuer int

func (v intValuer) Value() (driver.Value, error) { return int(v), nil }

// ptrValuer's Value has a pointer receiver: database/sql calls it on a nil
// pointer too, and uses what it returns.
type ptrValuer struct{}

func (*ptrValuer) Value() (driver.Value, error) { return []byte("x"), nil }

// valValuer's Value has a value receiver: a nil *valValuer is NULL.
type valValuer struct{}

func (valValuer) Value() (driver.Value, error) { return "v", nil }

// literal writes into the text only what means there what it means bound
// as an argument, whatever the session's SQL mode; anything else is left
// to go as an argument, after the claim.
func TestRideLiterals(t *testing.T) {
	var nilPtr *int
	seven := 7
	for _, c := range []struct {
		v    any
		want string
		ok   bool
	}{
		{nil, "NULL", true},
		{true, "1", true},
		{false, "0", true},
		{int64(-42), "", false},   // LIMIT reads a bound -42 as unsigned
		{intValuer(3), "", false}, // a Value that is no driver.Value
		{(*ptrValuer)(nil), "", false},
		{(*valValuer)(nil), "NULL", true},
		{int64(math.MinInt64), "", false},
		{uint64(7), "", false}, // bound as BIGINT UNSIGNED, which no literal is
		{uint8(7), "", false},
		{0.5, "5e-01", true},
		{"O'Brien", "'O''Brien'", true},
		{status("open"), "'open'", true},
		{&seven, "7", true},
		{int32(12), "12", true},
		{nilPtr, "NULL", true},
		{sql.NullString{}, "NULL", true},
		{sql.NullInt64{Int64: 3, Valid: true}, "3", true},
		{`back\slash`, "", false},
		{"nul\x00", "", false},
		{[]byte("bytes"), "", false},
		{time.Unix(0, 0), "", false},
		{math.NaN(), "", false},
		{float32(1), "", false},
		{struct{}{}, "", false},
	} {
		got, ok := literal(c.v)
		if got != c.want || ok != c.ok {
			t.Errorf("literal(%#v) = %q, %v; want %q, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

// Only an UPDATE or DELETE sent by Exec, or a SELECT sent by a Query form,
// whose '?' are all placeholders, carries the claim.
func TestRideStatements(t *testing.T) {
	for _, c := range []struct {
		query string
		args  []any
		exec  bool
		want  string // "" when it does not ride
	}{
		{"UPDATE t SET a = ? WHERE id = ?", []any{"x", 1}, true, "UPDATE t SET a = ? WHERE id = ? USING 'x', 1"},
		{"  delete FROM t WHERE id = ?", []any{2}, true, "  delete FROM t WHERE id = ? USING 2"},
		{"SELECT a FROM t WHERE b = ?", []any{nil}, false, "SELECT a FROM t WHERE b = ? USING NULL"},
		{"/* note */ SELECT 1", nil, false, "/* note */ SELECT 1"},
		{"SELECT a FROM t", nil, true, ""},                     // a SELECT through Exec
		{"UPDATE t SET a = 1", nil, false, ""},                 // an UPDATE through Query
		{"INSERT INTO t VALUES (?)", []any{1}, true, ""},       // its insert id would not be known
		{"SELECT '?' FROM t WHERE a = ?", []any{1}, false, ""}, // a '?' that is no placeholder
		{"/*!50000 UPDATE */ t SET a = 1", nil, true, ""},      // an executable comment
		{"CALL p()", nil, true, ""},                            // runs what the text does not show
		{"SELECT a FROM t WHERE b = ?", []any{[]byte("x")}, false, ""},
		{"DELETE FROM t WHERE id = ? /*/ ? */", []any{1, "x"}, true, ""}, // "/*/" opens a comment
		{"DELETE FROM t WHERE id = ? --\x7f ?", []any{1, "x"}, true, ""}, // "--" and a control character
		{"SELECT ? FROM t WHERE a = 1 -- why?\n", []any{1}, false, ""},   // a '?' in a comment
		{"SELECT ?e1", []any{2}, false, ""},                              // not a token of its own
		{"SELECT a FROM t WHERE b = ?", []any{-3}, false, ""},
		{"SELECT a FROM t LIMIT ?", []any{10}, false, "SELECT a FROM t LIMIT ? USING 10"},
		{"SELECT `a?` FROM t WHERE b = ?", []any{1}, false, ""},
	} {
		r := newRide(c.query, c.args, c.exec)
		got := ""
		if r != nil {
			got = r.query
			if len(r.using) > 0 {
				got += " USING " + strings.Join(r.using, ", ")
			}
		}
		if got != c.want {
			t.Errorf("newRide(%q, %v, exec %v) = %q, want %q", c.query, c.args, c.exec, got, c.want)
		}
	}
}
