package broker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBrokerLeaderStateHW(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := newLeaderState(1, partMeta{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}}, 2, 0, 0, now)

	require.False(t, l.appended(10, now), "no follower has fetched: HW stays")
	require.False(t, l.followerFetched(2, 10, now), "follower 3 in the ISR holds the HW back")
	require.True(t, l.followerFetched(3, 6, now))
	require.Equal(t, int64(6), l.hw())
	require.True(t, l.followerFetched(3, 10, now))
	require.Equal(t, int64(10), l.hw())

	// A follower reporting an older offset never moves the HW back.
	require.False(t, l.followerFetched(3, 4, now))
	require.Equal(t, int64(10), l.hw())

	// Unknown followers are ignored.
	require.False(t, l.followerFetched(9, 100, now))
}

func TestBrokerLeaderStateStrictMinISR(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := newLeaderState(1, partMeta{replicas: []int32{1, 2, 3}, isr: []int32{1}}, 2, 5, 5, now)
	require.Error(t, l.canAckAll())
	var ner *notEnoughReplicasError
	require.ErrorAs(t, l.canAckAll(), &ner)
	require.Equal(t, 1, ner.isr)
	require.Equal(t, int32(2), ner.min)

	// With the ISR below min ISR the HW does not advance, even though the
	// leader alone has the records (KIP-966).
	require.False(t, l.appended(9, now))
	require.Equal(t, int64(5), l.hw())

	// Follower 2 catches up and is confirmed into the ISR: HW advances.
	l.followerFetched(2, 9, now)
	require.True(t, l.setISR([]int32{1, 2}))
	require.Equal(t, int64(9), l.hw())
	require.NoError(t, l.canAckAll())
}

func TestBrokerLeaderStateISRChange(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	lag := 10 * time.Second
	l := newLeaderState(1, partMeta{replicas: []int32{1, 2, 3}, isr: []int32{1, 2, 3}}, 2, 0, 0, now)
	l.appended(5, now)
	l.followerFetched(2, 5, now)
	l.followerFetched(3, 2, now)
	require.Nil(t, l.isrChange(now.Add(lag), lag), "within the lag window nothing changes")

	// Follower 3 never caught up: after the window it leaves the ISR.
	later := now.Add(lag + time.Second)
	l.followerFetched(2, 5, later)
	require.Equal(t, []int32{1, 2}, l.isrChange(later, lag))
	l.setISR([]int32{1, 2})

	// It catches up (reaches the LEO, hence the HW): it may rejoin.
	l.followerFetched(3, 5, later)
	require.Equal(t, []int32{1, 2, 3}, l.isrChange(later, lag))
}
