package main

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// reqLog times requests by kind: from the request's first write, after the
// -rtt delay, to the first bytes of its reply. On one host that is the
// server's time for the request plus a loopback crossing each way; it shows
// what each statement and script of a Do costs the server, apart from the
// network. A request counts in the log that was set when it was written:
// the unlock and the release that a block's last Do sends after returning
// may count with the next block's variant (a few per block, seen as a
// count of 0.01 per op).
type reqLog struct {
	mu    sync.Mutex
	kinds map[string]*reqStat
}

type reqStat struct {
	n   int64
	sum time.Duration
}

func (l *reqLog) add(label string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]*reqStat{}
	}
	st := l.kinds[label]
	if st == nil {
		st = &reqStat{}
		l.kinds[label] = st
	}
	st.n++
	st.sum += d
}

// empty reports whether nothing was timed into the log.
func (l *reqLog) empty() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.kinds) == 0
}

// summary renders the log for ops operations: each kind with its count per
// operation and mean time, in the order of their share of the time, and the
// time per operation in all.
func (l *reqLog) summary(ops int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type kind struct {
		label string
		reqStat
	}
	var ks []kind
	var all time.Duration
	for label, st := range l.kinds {
		ks = append(ks, kind{label, *st})
		all += st.sum
	}
	slices.SortFunc(ks, func(a, b kind) int {
		if c := cmp.Compare(b.sum, a.sum); c != 0 {
			return c
		}
		return strings.Compare(a.label, b.label)
	})
	if ops == 0 {
		return "none"
	}
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %.2f × %v", k.label, float64(k.n)/float64(ops), short(k.sum/time.Duration(k.n))))
	}
	return fmt.Sprintf("%v per op: %s", short(all/time.Duration(ops)), strings.Join(parts, ", "))
}

// redisLabel names a Redis request by its command (the first of a
// pipeline): "*2\r\n$4\r\nPING\r\n" is PING.
func redisLabel(p []byte) string {
	for range 2 { // the array header, then the first bulk string's length
		i := bytes.Index(p, []byte("\r\n"))
		if i < 0 {
			return "?"
		}
		p = p[i+2:]
	}
	if i := bytes.Index(p, []byte("\r\n")); i >= 0 {
		p = p[:i]
	}
	return strings.ToUpper(string(p))
}

// mysqlLabel names a MySQL request by its command and, for a text query,
// its opening words: the verb, START TRANSACTION, BEGIN NOT ATOMIC (a
// compound statement) or CALL and the procedure's name.
func mysqlLabel(p []byte) string {
	if len(p) < 5 {
		return "?"
	}
	switch p[4] { // the command byte, after the packet's length and sequence
	case 0x03: // COM_QUERY
	case 0x16:
		return "(prepare)"
	case 0x17:
		return "(execute)"
	case 0x19:
		return "(close statement)"
	case 0x0e:
		return "(ping)"
	case 0x1f:
		return "(reset connection)"
	default:
		return fmt.Sprintf("(command 0x%02x)", p[4])
	}
	words := strings.FieldsFunc(string(p[5:min(len(p), 5+200)]), func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '('
	})
	if len(words) == 0 {
		return "(empty query)"
	}
	verb := strings.ToUpper(words[0])
	switch {
	case verb == "CALL" && len(words) > 1:
		return "CALL " + words[1]
	case verb == "START":
		return strings.ToUpper(strings.Join(words[:min(len(words), 2)], " "))
	case verb == "BEGIN" && len(words) > 2 && strings.EqualFold(words[1], "NOT"):
		return strings.ToUpper(strings.Join(words[:3], " "))
	}
	return verb
}
