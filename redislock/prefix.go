package redislock

// DefaultPrefix is the key prefix of a Locker whose Options.Prefix is empty.
const DefaultPrefix = defaultPrefix

// Prefix returns the prefix of every Redis key and channel l uses
// ([Options.Prefix] after defaults): the namespace its locks live in. Two
// Lockers with different prefixes hold separate locks on the same key.
func (l *Locker) Prefix() string {
	if l == nil {
		return ""
	}
	return l.opt.Prefix
}
