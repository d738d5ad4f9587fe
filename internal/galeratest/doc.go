// Package galeratest runs redfence against a three-node, multi-primary
// MariaDB Galera Cluster started on loopback by internal/testenv: application
// instances write through different nodes, and the tests check that the fence
// row still orders their transactions (Galera settles conflicting writes
// between nodes by certification at COMMIT, not by row locks), that a
// certification failure is retried under the same lock and token, and that
// fence.Lookup and the settlement of an unknown COMMIT outcome read the
// latest claim through any node.
//
// The package holds only tests; the cluster is started once for all of them.
package galeratest
