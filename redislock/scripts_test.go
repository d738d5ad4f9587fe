package redislock

import (
	"strings"
	"testing"

	"github.com/redfence/redfence/internal/testenv"
)

// Every script expands to one loadable source with its helpers, and its
// header comment comes first.
func TestScriptsExpandAndLoad(t *testing.T) {
	rdb := testenv.Redis(t)
	for name, s := range map[string]interface{ Hash() string }{
		"acquire.lua": scriptAcquire, "unlock.lua": scriptUnlock, "leave.lua": scriptLeave,
		"renew.lua": scriptRenew, "floor.lua": scriptFloor,
	} {
		src := luaSource(name)
		if strings.Contains(src, "--#include") {
			t.Errorf("%s: include left unexpanded", name)
		}
		if !strings.HasPrefix(src, "-- "+name+": KEYS[") {
			t.Errorf("%s does not open with its header", name)
		}
		sha, err := rdb.ScriptLoad(testCtx(t), src).Result()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if sha != s.Hash() {
			t.Errorf("%s: loaded digest %s, script digest %s", name, sha, s.Hash())
		}
	}
}

// Tokens stay exact around 2^53, where the scripts switch from Lua numbers to
// decimal strings, and far above it.
func TestTokenExactAroundTwoPow53(t *testing.T) {
	rdb := testenv.Redis(t)
	l := newTestLocker(t, rdb, nil)
	ctx := testCtx(t)
	// Each floor is at least the last token, so that it takes effect.
	for _, floor := range []uint64{
		1<<53 - 4, 1<<53 - 2, 1 << 53, 1<<53 + 2, 9999999999999999, 99999999999999999, 18446744073709551000,
	} {
		if err := l.RaiseTokenFloor(ctx, "exact", floor); err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 2; i++ {
			lk := mustLock(t, l, "exact")
			if lk.Token() != floor+i {
				t.Fatalf("token after floor %d: %d, want %d", floor, lk.Token(), floor+i)
			}
			mustUnlock(t, lk)
		}
	}
}
