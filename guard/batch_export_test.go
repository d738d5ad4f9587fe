package guard

// BatchMembers returns how many callers of key wait in g's batches, and how
// many batches hold them.
func BatchMembers(g *Guard, key string) (members, batches int) {
	g.batches.mu.Lock()
	defer g.batches.mu.Unlock()
	q := g.batches.keys[key]
	if q == nil {
		return 0, 0
	}
	for _, b := range q.list {
		members += b.present
	}
	return members, len(q.list)
}
