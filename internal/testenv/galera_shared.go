package testenv

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
)

// The cluster shared by the tests of one package: started on first use,
// stopped by the Run of [WithGalera]. It is package state for the same reason
// as the resolvers: the processes outlive any one test.
var sharedGalera struct {
	once sync.Once
	mu   sync.Mutex
	c    *Galera
	err  error
	took time.Duration
}

// GaleraCluster returns the test process's Galera cluster, starting it on
// first use (see [StartGalera]); later calls return the same cluster. The
// package's TestMain must wrap its testing.M with [WithGalera] so that the
// cluster is stopped after the tests. It fails the test at once, naming what
// is missing, when the cluster cannot be started.
//
// Tests share the cluster: they work in their own database ([GaleraDB]) and
// must leave every node running and joined.
func GaleraCluster(t testing.TB) *Galera {
	t.Helper()
	sharedGalera.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		start := time.Now()
		c, err := StartGalera(ctx)
		sharedGalera.mu.Lock()
		sharedGalera.c, sharedGalera.err, sharedGalera.took = c, err, time.Since(start)
		sharedGalera.mu.Unlock()
	})
	sharedGalera.mu.Lock()
	c, err, took := sharedGalera.c, sharedGalera.err, sharedGalera.took
	sharedGalera.mu.Unlock()
	if err != nil {
		t.Fatalf("testenv: cannot start the Galera cluster: %v", err)
	}
	if c == nil {
		t.Fatal("testenv: the Galera cluster was stopped (TestMain ran WithGalera's Run twice?)")
	}
	t.Logf("testenv: Galera cluster %s (started in %v): %s, %s, %s", c.Name, took.Round(100*time.Millisecond),
		c.Nodes[0].Addr, c.Nodes[1].Addr, c.Nodes[2].Addr)
	return c
}

// TestingM is what TestMain receives (*testing.M) and what goleak.VerifyTestMain
// takes.
type TestingM interface{ Run() int }

type galeraM struct{ m TestingM }

// WithGalera returns m whose Run also stops the cluster [GaleraCluster]
// started, once the tests have run (whether or not they passed):
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.WithGalera(m)) }
func WithGalera(m TestingM) TestingM { return galeraM{m} }

func (g galeraM) Run() int {
	defer StopGalera()
	return g.m.Run()
}

// StopGalera stops the cluster started by [GaleraCluster], if any.
func StopGalera() {
	sharedGalera.mu.Lock()
	c := sharedGalera.c
	sharedGalera.c = nil
	sharedGalera.mu.Unlock()
	if c != nil {
		c.Stop()
	}
}

// GaleraDB creates a database of the test's own on the cluster (the CREATE
// replicates to every node), and returns its name and a DSN for it on each
// node, in node order (parseTime on). The database is dropped when the test
// ends.
func GaleraDB(t testing.TB, c *Galera) (name string, dsns []string) {
	t.Helper()
	admin, err := sqlx.Open("mysql", c.Nodes[0].DSN(""))
	if err != nil {
		t.Fatalf("testenv: galera: %v", err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name = "rftest_" + RandomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: galera: create database %s on %s: %v", name, c.Nodes[0].Name, err)
	}
	t.Cleanup(func() { dropGaleraDB(t, c, name) })
	for _, n := range c.Nodes {
		dsns = append(dsns, n.DSN(name))
	}
	return name, dsns
}

// dropGaleraDB drops the database through the first node that answers.
func dropGaleraDB(t testing.TB, c *Galera, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for _, n := range c.Nodes {
		db, err := sql.Open("mysql", n.DSN(""))
		if err != nil {
			last = err
			continue
		}
		_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
		_ = db.Close()
		if err == nil {
			return
		}
		last = err
	}
	t.Logf("testenv: galera: drop database %s: %v", name, last)
}
