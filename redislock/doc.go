// Package redislock is a FIFO-fair distributed lock on Redis that hands every
// holder a fencing token which keeps increasing even when Redis loses data.
//
// A [Locker] is created once per process with [New] and shared by all
// goroutines. [Locker.Lock] waits in a queue kept in Redis: callers get the lock
// in the order their requests reached Redis, across processes, and nobody jumps
// the queue, not even the caller that just released the lock. On release the
// lock is handed directly to the first waiter inside the same Redis script, and
// that waiter is woken by a message on the one subscription connection its
// Locker shares between all waiters. Waiters also re-check on a bounded timer,
// so a lost message, a crashed holder or a crashed waiter delays the queue by
// at most a few seconds.
//
// # Fencing tokens
//
// [Lock.Token] is strictly greater than the token of every earlier holder of
// the same key. It is minted inside Redis as max(stored+1, server time in µs),
// so it stays monotonic when the stored value is lost (failover to a replica
// that missed the write, restart without persistence, eviction, FLUSHALL) as
// long as the servers' clocks do not go back. Pass the token to the resource
// you protect and let it reject older tokens: that is what makes the lock safe
// against pauses and partitions, which no lease can rule out. When the
// resource reports a higher token than Redis minted (after a failover to a
// server whose clock is behind), [Locker.RaiseTokenFloor] feeds it back.
//
// # Leases
//
// A held lock is renewed in the background every LeaseTTL/3, or a third of
// its own lease when it was acquired with [WithLease]. When renewal
// finds the lock gone, or cannot reach Redis before the lease ends,
// [Lock.Done] is closed and [Lock.Err] returns [ErrLost]: the holder must stop
// acting on the lock.
//
// # Redis layout
//
// Every lock uses five keys and, for each Locker waiting on it, a channel, all
// in one hash slot and under Options.Prefix: <prefix>:{<key>}:lock, :token,
// :q, :w, :rel and :ch:<Locker id>, or
// <prefix>:#{<hex digest of key>}:... when the key contains '{' or '}';
// [KeyNamesFor] returns them. When a lock is free and nobody waits only the
// token key remains, with :rel (the last released acquisitions, which answer
// retried unlocks) for a lease after the last release; the token key expires
// after Options.TokenTTL without use. The scripts need Redis 7.0 or later. With a
// [redis.ClusterClient] the channels are sharded pub/sub channels
// (SPUBLISH/SSUBSCRIBE), and a Locker keeps one subscription connection per
// hash slot it waits on instead of one in all.
//
// # Queue
//
// A waiter re-checks at least every Options.RecheckInterval; that call also
// refreshes its entry. An entry not refreshed within Options.WaiterTimeout
// belongs to a dead process and is dropped by the next caller that finds it
// at the head of the queue; a lock handed to such a waiter just before it died
// comes back after WaiterTimeout, because hand-offs carry that short lease
// until the new holder's Locker renews them, WaiterTimeout/2 before that lease
// can end (so a lock held briefly after a hand-off costs no renewal). A waiter that was itself too slow
// to refresh its entry (a pause longer than WaiterTimeout) re-enters at the
// back of the queue.
package redislock
