// Command holder is the separate application process of the chaos scenarios:
// it buys inventory through guard.Do, one operation at a time, on commands
// read from its standard input, and reports each step on its standard output
// so that the test can pause it (SIGSTOP) or kill it (SIGKILL) at a known
// point.
//
// Commands (one per line):
//
//	buy <op-id> <qty>        buy straight through
//	buy <op-id> <qty> wait   stop inside fn, after reading the stock, until "go"
//	go                       continue a waiting buy
//	quit                     exit
//
// Output lines: "ready", "locking <op-id>", "acquired <op-id> <token>",
// "infn <op-id> <token> <connection-id>", "done <op-id> <outcome> <token> <error...>".
package main
