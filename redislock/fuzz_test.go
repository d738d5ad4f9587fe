package redislock

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/internal/testenv"
)

// scriptState is everything the scripts keep for one lock.
type scriptState struct {
	lockVal string // "" when absent
	tok     uint64 // token in the lock value
	ids     []string
	q       []redis.Z
	w       map[string]string
}

func readState(t *testing.T, ctx context.Context, rdb *redis.Client, k lockKeys) scriptState {
	t.Helper()
	var s scriptState
	v, err := rdb.Get(ctx, k.lock).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	s.lockVal = v
	if v != "" {
		parts := strings.SplitN(v, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("malformed lock value %q", v)
		}
		if s.tok, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
			t.Fatalf("lock value %q: %v", v, err)
		}
		s.ids = strings.Fields(parts[1])
		if len(s.ids) == 0 {
			t.Fatalf("lock %q held by no acquisition", v)
		}
		if pttl := rdb.PTTL(ctx, k.lock).Val(); pttl == -1 {
			t.Fatalf("lock %q without a lease", v)
		}
	}
	if s.q, err = rdb.ZRangeWithScores(ctx, k.q, 0, -1).Result(); err != nil {
		t.Fatal(err)
	}
	if s.w, err = rdb.HGetAll(ctx, k.w).Result(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s scriptState) queued() []string {
	ids := make([]string, len(s.q))
	for i, z := range s.q {
		ids[i] = z.Member.(string)
	}
	return ids
}

// FuzzScripts drives random sequences of the Lua scripts for one lock from a
// few actors and checks the invariants after every step: q and w agree, a
// lock value is well-formed and leased, tokens only grow, queue entries keep
// their sequence and order, a hand-off goes to the first entry that was still
// queued, a free lock has no live waiter, and no script fails. Each input
// byte is one step.
func FuzzScripts(f *testing.F) {
	for _, seed := range []string{
		"\x00\x01\x02\x10\x11\x12\x20\x21\x22",
		"\x00\x00\x01\x11\x10\x10\x02\x30\x31\x12",
		"\x00\x41\x42\x50\x01\x02\x20\x21\x60\x03\x13",
		"\x70\x00\x01\x02\x03\x40\x41\x42\x10\x11\x12\x13\x33\x32",
		"\x00\x00\x00\x10\x10\x10\x01\x31\x21\x11",
	} {
		f.Add([]byte(seed))
	}
	rdb := testenv.Redis(f)
	prefix := testenv.Prefix(f)
	f.Fuzz(func(t *testing.T, steps []byte) {
		if len(steps) > 64 {
			steps = steps[:64]
		}
		ctx := context.Background()
		l := New(rdb, &Options{Prefix: prefix + ":" + testenv.RandomHex(4)})
		k := l.keys("fuzz")
		defer rdb.Del(ctx, k.all()...)
		type actor struct {
			pending string   // queued acquisition id
			held    []string // acquisitions believed held
		}
		actors := make([]actor, 4)
		var maxTok uint64
		freeOK := true // false after a simulated crash, until someone acquires or leaves
		prev := readState(t, ctx, rdb, k)
		for step, b := range steps {
			a := &actors[b&3]
			owner := "o" + strconv.Itoa(int(b&3))
			wt := "60000"
			if b&0x80 != 0 {
				wt = "1" // a waiter that is dead almost at once
			}
			var id string
			op := (b >> 4) & 7
			switch op {
			case 0, 1, 4, 5: // Lock (0,1,4), TryLock (5)
				id = a.pending
				try := "0"
				if id == "" {
					id, try = l.newID(), "2"
				}
				if op == 5 {
					try, id = "1", l.newID()
				}
				res, err := scriptAcquire.Run(ctx, rdb, k.all(), id, owner, 60000, 600000, wt, 60000, try, "PUBLISH").Slice()
				if err != nil {
					t.Fatalf("step %d acquire: %v", step, err)
				}
				if res[0] == int64(1) {
					a.pending = ""
					a.held = append(a.held, id)
				} else if try != "1" {
					a.pending = id
				}
				freeOK = true
			case 2: // Unlock
				if len(a.held) == 0 {
					continue
				}
				id = a.held[0]
				n, err := scriptUnlock.Run(ctx, rdb, k.all(), id, 600000, "PUBLISH").Int64()
				if err != nil {
					t.Fatalf("step %d unlock: %v", step, err)
				}
				if n == 1 {
					a.held = a.held[1:]
				}
			case 3: // Leave (cancel)
				if a.pending == "" {
					continue
				}
				id = a.pending
				if err := scriptLeave.Run(ctx, rdb, k.all(), id, 600000, "PUBLISH").Err(); err != nil {
					t.Fatalf("step %d leave: %v", step, err)
				}
				a.pending = ""
				freeOK = true
			case 6: // the holder crashes: its lease ends
				rdb.Del(ctx, k.lock)
				for i := range actors {
					actors[i].held = nil
				}
				freeOK = false
			case 7: // renew everything the actor holds
				for _, h := range a.held {
					if err := scriptRenew.Run(ctx, rdb, []string{k.lock}, 60000, h).Err(); err != nil {
						t.Fatalf("step %d renew: %v", step, err)
					}
				}
			}
			cur := readState(t, ctx, rdb, k)
			// q and w describe the same waiters.
			qs := cur.queued()
			for wid := range cur.w {
				if !slices.Contains(qs, wid) {
					t.Fatalf("step %d: %s in w but not in q %v", step, wid, qs)
				}
			}
			for _, qid := range qs {
				if _, ok := cur.w[qid]; !ok {
					t.Fatalf("step %d: %s in q but not in w", step, qid)
				}
			}
			// Entries keep their sequence; new ones go to the back.
			before := map[string]float64{}
			last := 0.0
			for _, z := range prev.q {
				before[z.Member.(string)] = z.Score
				last = max(last, z.Score)
			}
			for _, z := range cur.q {
				if s, ok := before[z.Member.(string)]; ok && s != z.Score {
					t.Fatalf("step %d: %v moved from %v", step, z, s)
				} else if !ok && z.Score <= last {
					t.Fatalf("step %d: new entry %v not behind the queue (last %v)", step, z, last)
				}
			}
			// Tokens only grow.
			if cur.lockVal != "" && cur.tok != prev.tok {
				if cur.tok <= maxTok {
					t.Fatalf("step %d: token %d after %d", step, cur.tok, maxTok)
				}
				maxTok = cur.tok
				// A grant to a waiter goes to the first entry still queued:
				// everything that was ahead of it has left the queue.
				newHolder := cur.ids[0]
				pq := prev.queued()
				if i := slices.Index(pq, newHolder); i > 0 {
					for _, ahead := range pq[:i] {
						if slices.Contains(qs, ahead) {
							t.Fatalf("step %d: %s got the lock while %s, ahead of it, still waits", step, newHolder, ahead)
						}
					}
				}
				// The actors learn about hand-offs the way waiters do.
				for i := range actors {
					if actors[i].pending == newHolder {
						actors[i].pending = ""
						actors[i].held = append(actors[i].held, newHolder)
					}
				}
			}
			if cur.lockVal == "" && len(cur.q) > 0 && freeOK {
				// Allowed only if every waiter is dead (w deadlines passed).
				now := time.Now().UnixMilli()
				for _, qid := range qs {
					d, _, _ := strings.Cut(cur.w[qid], ":")
					if ms, _ := strconv.ParseInt(d, 10, 64); ms > now+1000 {
						t.Fatalf("step %d: lock free while live waiter %s is queued", step, qid)
					}
				}
			}
			prev = cur
		}
	})
}
