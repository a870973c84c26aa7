package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollEvery is how often Wait, Retry and Consistently check their
// condition.
const PollEvery = 50 * time.Millisecond

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks an error that no amount of waiting fixes: Wait and Retry
// fail at once with it.
func Permanent(err error) error { return permanentError{err} }

// Wait polls cond every PollEvery until it returns nil, and fails the test
// with the last error when timeout passes or cond returns a Permanent
// error. It is the tree's one way for a test to wait for a condition: never
// sleep for an assumed time instead.
func Wait(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Retry(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Retry is Wait returning the error instead of failing the test, for use
// off the test goroutine.
func Retry(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var pe permanentError
		if errors.As(err, &pe) {
			return pe.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		time.Sleep(PollEvery)
	}
}

// Consistently checks cond every PollEvery for d and fails the test as
// soon as it returns an error: for "this never happens" (no new leader, no
// rebalance) over a window.
func Consistently(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(PollEvery)
	}
}

// WaitProgress is Wait for a condition reached in steps whose pace is the
// machine's (records consumed, offsets committed one by one): cond returns
// how far it got and nil once the condition holds. It fails the test when
// that count has not grown for stall, or when cond returns a Permanent
// error: a loaded machine may take long, a stuck one fails.
func WaitProgress(t testing.TB, stall time.Duration, what string, cond func() (int64, error)) {
	t.Helper()
	if err := RetryProgress(stall, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// RetryProgress is WaitProgress returning the error instead of failing the
// test.
func RetryProgress(stall time.Duration, cond func() (int64, error)) error {
	best, since := int64(0), time.Now()
	for first := true; ; first = false {
		n, err := cond()
		if err == nil {
			return nil
		}
		var pe permanentError
		if errors.As(err, &pe) {
			return pe.err
		}
		if first || n > best {
			best, since = n, time.Now()
		} else if time.Since(since) > stall {
			return fmt.Errorf("no progress for %s (at %d): %w", stall, best, err)
		}
		time.Sleep(PollEvery)
	}
}
