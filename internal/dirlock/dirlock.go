// Package dirlock holds an exclusive lock on a data directory, so that two
// processes never use one: a second `sluice dev` or `sluice broker` on the
// same --data-dir is refused at start with the holder's pid, instead of
// both writing the same logs and database.
//
// The lock is an advisory flock(2) on <dir>/.lock, which also records the
// holder's pid (on Unix systems; elsewhere the pid is recorded but the lock
// is not enforced). The kernel releases it when the holder's file descriptor
// closes, so a process killed with SIGKILL leaves no stale lock: the next
// start succeeds. The lock file itself stays (removing it would let a third
// process lock a new file while a second still holds the old one).
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FileName is the lock file in a locked directory.
const FileName = ".lock"

// HeldError reports a directory locked by another holder.
type HeldError struct {
	Dir string
	// PID is the holder's process id, 0 when it could not be read (the
	// holder may not have written it yet).
	PID int
}

func (e *HeldError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = fmt.Sprintf("another process (pid %d)", e.PID)
	}
	return fmt.Sprintf("data dir %s is in use by %s: stop it first, or use another data dir", e.Dir, holder)
}

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// Acquire creates dir if needed and locks it without waiting. It returns
// a *HeldError when another holder has the lock, also one in this process
// (each Acquire is its own holder).
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		if errors.Is(err, errHeld) {
			return nil, &HeldError{Dir: dir, PID: readPID(path)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		unlock(f)
		f.Close()
		return nil, fmt.Errorf("write lock file %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release unlocks the directory. It is safe to call more than once.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	unlock(l.f)
	err := l.f.Close()
	l.f = nil
	return err
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// errHeld is what lock returns when another holder has the lock.
var errHeld = errors.New("locked by another holder")
