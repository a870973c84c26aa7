package testenv

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetryProgress: RetryProgress waits as long as the count grows, ends
// when the condition holds, and fails once the count stands still for the
// stall, or at once on a Permanent error.
func TestRetryProgress(t *testing.T) {
	t.Parallel()
	notYet := errors.New("not yet")

	// Growing by one per poll for longer than the stall: it waits.
	n := int64(0)
	start := time.Now()
	require.NoError(t, RetryProgress(2*PollEvery, func() (int64, error) {
		if n++; n == 10 {
			return n, nil
		}
		return n, notYet
	}))
	require.Greater(t, time.Since(start), 5*PollEvery, "ten polls")

	// Standing still: fails after the stall, with the last error.
	err := RetryProgress(3*PollEvery, func() (int64, error) { return 7, notYet })
	require.ErrorIs(t, err, notYet)
	require.ErrorContains(t, err, "no progress for 150ms (at 7)")

	// Permanent: at once.
	err = RetryProgress(time.Hour, func() (int64, error) { return 0, Permanent(notYet) })
	require.Equal(t, notYet, err)
}
