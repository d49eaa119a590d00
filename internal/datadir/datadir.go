// Package datadir prepares a controller's data directory: private
// permissions (S4) and an OS lock that keeps a second controller out (S1).
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/musterhq/muster"
)

// LockFile is the name of the lock file in a data dir; it holds the pid
// of the controller that holds the lock.
const LockFile = "muster.lock"

// Ensure creates dir (and its parents) 0700, or tightens an existing dir
// that others can read, write or enter to 0700 (S4).
func Ensure(dir string) error {
	if dir == "" {
		return muster.Errorf(muster.EInvalid, "data dir is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, errors.Unwrap(err))
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, errors.Unwrap(err))
	}
	if !st.IsDir() {
		return muster.Errorf(muster.EInvalid, "data dir %s is not a directory", dir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("data dir %s: make it private: %w", dir, errors.Unwrap(err))
		}
	}
	// A directory we cannot write fails here, not half-way through a first
	// start.
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("data dir %s is not writable: %w", dir, errors.Unwrap(err))
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Lock is a held data-dir lock.
type Lock struct {
	f *os.File
}

// Acquire takes the data dir's lock without waiting. When another process
// holds it, the error is EConflict "data dir DIR is in use by pid N". The
// kernel releases the lock when the process ends, however it ends.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir %s: %w", dir, errors.Unwrap(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, muster.Errorf(muster.EConflict, "data dir %s is in use by pid %s", dir, holder(path))
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// holder reads the pid the lock's holder wrote ("unknown" if it has not
// written it yet).
func holder(path string) string {
	b, err := os.ReadFile(path)
	pid := strings.TrimSpace(string(b))
	if err != nil || pid == "" {
		return "unknown"
	}
	if _, err := strconv.Atoi(pid); err != nil {
		return "unknown"
	}
	return pid
}

// Release gives the lock up. It is safe to call more than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	if errors.Is(err, fs.ErrClosed) {
		return nil
	}
	return err
}
