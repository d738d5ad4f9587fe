package chaos

import "testing"

// Scenario 2b: as scenario 2, with every Guard on the defaults, which hand
// the lock on at the claim (guard.HandOffAuto on a single server) and relay
// transactions. The holder process
// is frozen inside fn after its claim, so the next caller already holds the
// lock: its claim waits for the frozen transaction's fence row until the
// database ends that transaction (idle_transaction_timeout, or a KILL), then
// commits. When the frozen process resumes, its transaction is gone: the
// write it then makes must not be applied under its old token. Its retry
// takes a new turn of the lock and a new token, above the one that
// committed meanwhile, and may succeed as a fresh critical section.
func TestScenarioPausedHolderHandOff(t *testing.T) {
	runPausedHolder(t, newEnv(t, "paused-holder-handoff", 2000), true)
}
