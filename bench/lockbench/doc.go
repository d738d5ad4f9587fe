// Command lockbench measures redislock against a Redis server and prints every
// figure next to the Redis PING round trip measured in the same run:
//
//   - uncontended Lock+Unlock p50, as a multiple of PING p50;
//   - hand-off: from the holder's Unlock returning to the next waiter's Lock
//     returning, p50, as a multiple of PING p50;
//   - N goroutines on one key with a short critical section: FIFO inversions,
//     Jain fairness index over the goroutines, Redis commands per critical
//     section (flat as N grows means no polling storm).
//
// Usage:
//
//	go run ./bench/lockbench [-addr 127.0.0.1:6379] [-n 2000] [-waiters 8,32,128] [-cs 100us] [-d 3s]
//	                         [-waiter-timeout 5s] [-recheck 0]
//
// It writes only keys under a random "lockbench:" prefix and deletes them at
// the end.
package main
