// Package redfenceotel records OpenTelemetry traces and metrics of
// [guard.Guard.Do] calls, built on [guard.Hooks]. It is a module of its own so
// that redfence's core does not depend on OpenTelemetry.
//
//	g, err := redfenceotel.NewGuard(locker, db, &guard.Options{ /* yours */ }, nil)
//	if err != nil { ... }
//
// A Guard reads its hooks once, when it is built, so they are added while
// building it: [NewGuard] builds the Guard, and [GuardOptions] returns the
// guard.Options to pass to a constructor of your own choosing. Set
// [Options].DisableTracing or DisableMetrics to record only the other
// signal.
//
// Traces: a span "redfence.Do" per call (attributes redfence.key,
// redfence.token, redfence.attempts, redfence.outcome; error status unless
// it committed), with a child span per step: redfence.lock (the wait in the
// FIFO queue), redfence.claim, redfence.fn and redfence.commit per attempt,
// and redfence.unlock. The Do span is started from the ctx given to Do, and
// fn's ctx carries it, so spans of fn's own statements nest below it.
//
// Metrics (names as exported; durations in seconds):
//   - redfence.lock.wait: histogram of the time spent queued for the lock,
//     with redfence.acquired;
//   - redfence.lock.hold: histogram of the time from grant to unlock;
//   - redfence.do.duration: histogram of whole calls, with redfence.outcome;
//   - redfence.do.calls: counter of calls by redfence.outcome, the call's
//     guard.OutcomeLabel: committed; fn_error when fn returned an error of
//     its own (a business answer); not_acquired, fenced, lost,
//     not_committed, outcome_unknown; failed for other failures of the
//     lock, the database or guard;
//   - redfence.do.retries: counter of transaction retries;
//   - redfence.locks.held: up-down counter of locks held now by this process;
//   - redfence.fallback.active: up-down counter of Guards in database mode
//     now (guard.Options.Outage.Fallback); redfence.do.calls also carries
//     redfence.mode (redis or database).
//
// Exported to Prometheus they are redfence_lock_wait_seconds,
// redfence_do_calls_total and so on: the names of the /metrics of the
// inventory example (examples/inventory).
//
// Keys are not metric attributes by default (their number is unbounded); set
// Options.MetricKey to map a key to a bounded label.
//
// # Versions
//
// This module is released on its own, with tags of the form
// extra/redfenceotel/vX.Y.Z in the redfence repository, and requires the
// core module (github.com/redfence/redfence) at a tagged version or at a
// pseudo-version of a commit of the core that it builds with. A release tags
// the core first when it needs a new one, then points this module's go.mod
// at that tag and tags this module.
package redfenceotel
