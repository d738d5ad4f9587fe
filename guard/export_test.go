package guard

import "context"

// SetBeforeCommit installs f to run between fn and COMMIT.
func SetBeforeCommit(g *Guard, f func(ctx context.Context, tx *Tx)) { g.beforeCommit = f }

// Settle runs the commit-outcome check for an attempt that claimed key with
// token and opID.
func Settle(ctx context.Context, g *Guard, key string, token uint64, opID string) (bool, error) {
	return g.settle(ctx, &Tx{key: key, resource: g.FenceResource(key), token: token, opID: opID})
}
