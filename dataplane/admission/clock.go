package admission

import "time"

// Clock is the Enforcer's time: its buckets read Now, and its exchange
// loop (Run) and the calls waiting for a first allotment wait on After,
// so that a test drives them without waiting real intervals. The zero
// Config's is the real one.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives the time once d has passed
	// (at once when d <= 0).
	After(d time.Duration) <-chan time.Time
}

// realClock is time's.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
