// Package testrules holds no code: its test checks rules about the
// repository's tests themselves (see testrules_test.go), so that `make lint`
// and `make test` fail when a test breaks one.
//
// The rule today: a test never sleeps as synchronisation. It waits on a
// condition instead (internal/testenv.Wait, or a loop that polls one with a
// deadline). A time.Sleep in a _test.go file carries a comment on its line
// saying which of the legitimate kinds it is:
//
//	poll:     one turn of a loop that polls a condition against a deadline
//	pacing:   the shape of a load (records per second, spacing of calls)
//	fault:    how long a fault lasts, or when it strikes
//	window:   the length of a measurement or observation
//	absence:  time for something that must not happen to show itself
//	backoff:  the delay before retrying a failed call
//	clock:    wall-clock time the code under test measures (a record's age)
package testrules
