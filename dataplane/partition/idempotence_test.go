package partition

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// A batch held in the sequence-gap wait whose partition stops being led
// meanwhile is refused as not-leader: it is never appended by a former
// leader, nothing panics, and the partition lock is released.
func TestPartitionGapWaitEndsAfterRoleChange(t *testing.T) {
	for _, acks := range []sluicev1.Acks{sluicev1.Acks_ACKS_ALL, sluicev1.Acks_ACKS_LEADER} {
		t.Run(acks.String(), func(t *testing.T) {
			p := newFollower(t, newTestHost(t), false)
			lead(t, p, 8)
			leo := p.log.LEO()
			b, err := record.AppendBatch(nil, record.BatchHeader{ProducerID: 5, ProducerEpoch: 0, BaseSequence: 3}, []record.Record{{Value: []byte("x")}})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan string, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						done <- fmt.Sprint("PANIC: ", r)
					}
				}()
				_, err := p.Produce(ctx, []log.ValidBatch{validBatch(t, b)}, acks, 5*time.Second, nil)
				done <- fmt.Sprint(err)
			}()
			waitGoroutine(t, "in the gap wait: sequence 3 without 0..2", "partition.waitSequenceGap")
			p.mu.Lock()
			cancel() // the client gives up (as when the 1 s wait ends)
			waitGoroutine(t, "the produce woken, waiting for the partition lock", "partition.(*Replica).Produce", "sync.(*Mutex).Lock")
			p.role, p.lead = RoleFollower, nil // and the replica stops leading
			p.notifyLocked()
			p.mu.Unlock()
			select {
			case r := <-done:
				require.Contains(t, r, "is not leading the partition", "refused as not-leader")
			case <-time.After(3 * time.Second):
				t.Fatal("produce did not return")
			}
			require.True(t, p.mu.TryLock(), "the partition lock is free")
			p.mu.Unlock()
			require.Equal(t, leo, p.log.LEO(), "nothing appended")
		})
	}
}

// soleLeader opens a replica in dir that leads alone (RF 1), its log
// rolling every segBytes.
func soleLeader(t *testing.T, dir string, segBytes int64) *Replica {
	t.Helper()
	h := newTestHost(t)
	h.SegmentBytes = segBytes
	cfg := TopicConfig{MinISR: 1}
	p, err := Open(h, Spec{TenantID: "t1", TopicID: "topic-1", Partition: 0, Dir: dir, Config: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { p.log.Close() })
	p.Update(context.Background(), Assignment{Replicas: []int32{1}, Leader: 1, LeaderEpoch: 0, ISR: []int32{1}}, cfg)
	require.Equal(t, RoleLeader, p.Status().Role)
	return p
}

// produceSeq appends producer 7's batch of n records at sequence seq and
// returns the answer.
func produceSeq(t *testing.T, p *Replica, n int, seq int32) ProduceResult {
	t.Helper()
	res, err := p.Produce(context.Background(), []log.ValidBatch{validBatch(t, idempotentBatch(t, n, seq))}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	require.NoError(t, err)
	return res
}

func snapshotOffsets(t *testing.T, p *Replica) []int64 {
	t.Helper()
	offs, err := producerstate.Snapshots(p.Dir())
	require.NoError(t, err)
	return offs
}

// TestPartitionProducerSnapshotsAtRoll: the checkpoint loop's
// SnapshotProducers writes a producer-state snapshot only once the log
// rolled since the newest one, however long ago that was, and always at
// close (force); ordinary appends in the active segment write none
// (issue 15: a snapshot per changed partition every 30 s, 12,000 fsyncs
// at 6000 partitions).
func TestPartitionProducerSnapshotsAtRoll(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 4096)
	seq := int32(0)
	later := time.Now()
	tick := func() {
		t.Helper()
		later = later.Add(time.Minute) // past any interval
		require.NoError(t, p.SnapshotProducers(later, false))
	}
	for range 5 {
		produceSeq(t, p, 3, seq)
		seq += 3
		tick()
	}
	require.Empty(t, p.log.ClosedSegments(), "still one segment")
	require.Empty(t, snapshotOffsets(t, p), "appends alone write no snapshot")

	for len(p.log.ClosedSegments()) == 0 {
		produceSeq(t, p, 3, seq)
		seq += 3
	}
	tick()
	leo := p.log.LEO()
	require.Equal(t, []int64{leo}, snapshotOffsets(t, p), "the roll is followed by a snapshot")
	produceSeq(t, p, 3, seq)
	tick()
	require.Equal(t, []int64{leo}, snapshotOffsets(t, p), "then appends write none again")

	require.NoError(t, p.SnapshotProducers(later, true))
	require.Equal(t, []int64{leo, p.log.LEO()}, snapshotOffsets(t, p), "close writes one")
	require.NoError(t, p.SnapshotProducers(later, true))
	require.Len(t, snapshotOffsets(t, p), 2, "nothing new: none")
}

// TestPartitionProducerStateAfterCrash: a broker that crashes (no close,
// no snapshot) after appends in the active segment, past the newest
// snapshot, rebuilds the same producer state from the log when it opens:
// a retry of the last batch is answered as a duplicate with its original
// offset, and the next sequence is accepted.
func TestPartitionProducerStateAfterCrash(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 4096)
	seq := int32(0)
	for len(p.log.ClosedSegments()) < 2 {
		produceSeq(t, p, 3, seq)
		seq += 3
		require.NoError(t, p.SnapshotProducers(time.Now(), false))
	}
	snaps := snapshotOffsets(t, p)
	require.NotEmpty(t, snaps)
	var last ProduceResult
	for range 4 { // in the active segment, after the newest snapshot
		last = produceSeq(t, p, 3, seq)
		seq += 3
	}
	require.NoError(t, p.SnapshotProducers(time.Now(), false))
	require.Equal(t, snaps, snapshotOffsets(t, p), "no roll: no snapshot of these")
	require.Greater(t, p.log.LEO(), snaps[len(snaps)-1])
	p.mu.Lock()
	want, ok := p.pstate.Producer(7)
	p.mu.Unlock()
	require.True(t, ok)

	// The crash: the disk as it is now, without a close.
	crashed := t.TempDir()
	copyDir(t, p.Dir(), crashed)
	p2 := soleLeader(t, crashed, 4096)
	p2.mu.Lock()
	got, ok := p2.pstate.Producer(7)
	p2.mu.Unlock()
	require.True(t, ok)
	require.Equal(t, want, got)

	retry := produceSeq(t, p2, 3, seq-3)
	require.True(t, retry.Duplicate, "the retry of the last batch is a duplicate")
	require.Equal(t, last.Base, retry.Base)
	leo := p2.log.LEO()
	next := produceSeq(t, p2, 3, seq)
	require.False(t, next.Duplicate)
	require.Equal(t, leo, next.Base)
}

// TestPartitionProducerSnapshotAfterCrashAtRoll: a crash after a roll,
// before its snapshot, leaves the newest snapshot below the active
// segment; the reopened replica knows, and snapshots at its next call, so
// a later crash again replays at most the active segment.
func TestPartitionProducerSnapshotAfterCrashAtRoll(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 4096)
	seq := int32(0)
	for len(p.log.ClosedSegments()) == 0 {
		produceSeq(t, p, 3, seq)
		seq += 3
	}
	require.NoError(t, p.SnapshotProducers(time.Now(), false))
	first := snapshotOffsets(t, p)
	require.Len(t, first, 1)
	for len(p.log.ClosedSegments()) == 1 {
		produceSeq(t, p, 3, seq)
		seq += 3
	}
	crashed := t.TempDir()
	copyDir(t, p.Dir(), crashed) // before the snapshot of the second roll

	p2 := soleLeader(t, crashed, 4096)
	require.Equal(t, first, snapshotOffsets(t, p2))
	require.NoError(t, p2.SnapshotProducers(time.Now(), false))
	require.Equal(t, append(first, p2.log.LEO()), snapshotOffsets(t, p2))
}

// copyDir copies the files of dir into to.
func copyDir(t *testing.T, dir, to string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, e.Name()), b, 0o644))
	}
}

// waitGoroutine waits until some goroutine's stack holds every one of
// frames (substrings of runtime.Stack's output), e.g. one blocked at a
// given point: a test that needs a goroutine parked there before it goes
// on waits for that, not for a guessed duration.
func waitGoroutine(t *testing.T, what string, frames ...string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			found := true
			for _, f := range frames {
				if !strings.Contains(g, f) {
					found = false
					break
				}
			}
			if found {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for a goroutine %s: none in 10s\n%s", what, stacks)
		}
		time.Sleep(time.Millisecond) // poll: until the goroutine is there
	}
}
