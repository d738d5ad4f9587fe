package devserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// A directory a Start function creates holds a lock file, locked for as
// long as the program that created it runs: the kernel drops the lock when
// that program ends, however it ends. A directory whose lock is free was
// left by a program killed before it could remove it, and the next Start
// function that creates a directory of the same kind removes it.

// lockName is the lock file in each directory a Start function creates.
const lockName = "devserver.lock"

// unlockedGrace is how long a directory without a lock file is left alone:
// it may be one that is being created. Older ones come from a program that
// died between creating the directory and its lock.
const unlockedGrace = time.Hour

// tempDir is a directory a Start function created, and the lock that marks
// it in use.
type tempDir struct {
	path string
	lock *os.File // held open, and locked where the system has locks
}

// newTempDir removes the stale directories named like pattern in the
// temporary directory, then creates a new one, locked.
func newTempDir(pattern string) (*tempDir, error) {
	sweepStale(os.TempDir(), pattern)
	path, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	lock, err := createLock(path)
	if err != nil {
		_ = os.RemoveAll(path)
		return nil, err
	}
	return &tempDir{path: path, lock: lock}, nil
}

// createLock creates the lock file of dir, locked. The file is locked under
// a temporary name and then renamed, so that a sweep never finds it
// unlocked.
func createLock(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	if err := tryLock(f); err != nil && !errors.Is(err, errNoLocks) {
		_ = f.Close()
		return nil, fmt.Errorf("devserver: lock %s: %w", dir, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("devserver: %w", err)
	}
	return f, nil
}

// remove removes the directory, then lets its lock go.
func (d *tempDir) remove() error {
	err := os.RemoveAll(d.path)
	_ = d.lock.Close()
	return err
}

// sweepStale removes the directories in root named like pattern whose lock
// is free, and returns their paths. Directories it cannot remove (another
// user's) are left.
func sweepStale(root, pattern string) []string {
	matches, _ := filepath.Glob(filepath.Join(root, pattern+"*"))
	var removed []string
	for _, dir := range matches {
		if stale(dir) && os.RemoveAll(dir) == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

// stale reports whether dir is a directory nobody holds: its lock file can
// be locked, or it has none and is older than unlockedGrace.
func stale(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Since(st.ModTime()) > unlockedGrace
	}
	if err != nil {
		return false
	}
	defer f.Close()
	// Locked here, the lock is dropped by Close once dir is gone.
	return tryLock(f) == nil
}
