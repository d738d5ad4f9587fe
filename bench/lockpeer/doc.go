// Command lockpeer measures redislock against its best-known peer,
// github.com/bsm/redislock, side by side in one run on the same Redis: N
// goroutines on one key, each looping lock → critical section → unlock.
//
// Per library and goroutine count it prints critical sections per second,
// acquire latency (p50, p99, max), the time the lock sits idle between two
// holders, Redis commands per critical section (counted on the clients with
// a go-redis hook), CPU per critical section of this process and of
// redis-server, the server-side time of every command (INFO commandstats),
// and for redislock the FIFO inversions; then one line of ratios. redislock
// runs twice: as a service would call it (every Unlock with a ctx that can
// end) and as redislock-bg, whose Unlock gets context.Background(), so that
// its request is sent from the caller's goroutine: the line of ratios also
// compares the two.
// bsm/redislock has no queue: its waiters poll with a retry strategy, and
// -bsm chooses which ones to run.
//
// Usage (from this directory; it is a module of its own so that the peer
// library never reaches users of redfence):
//
//	go run . [-addr 127.0.0.1:6379] [-waiters 2,8,32,128] [-cs 100us] [-sleep] [-d 3s] [-rounds 3]
//	         [-bsm linear:1ms,exp:16ms:64ms] [-only redislock,...] [-cpuprofile cpu.out -profile redislock@128]
//
// It writes only keys under a random "lockpeer:" prefix and deletes them at
// the end.
package main
