package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// plainProduce appends one non-idempotent batch of one record to p,
// stamped now (the log rolls by age before a batch from 1970).
func plainProduce(t *testing.T, p *Replica) int64 {
	t.Helper()
	b, err := log.EncodeLeaderBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1}, []record.Record{{Value: []byte("v")}})
	require.NoError(t, err)
	res, err := p.Produce(context.Background(), []log.ValidBatch{b}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	require.NoError(t, err)
	return res.Base
}

// baseOffsets lists the base offsets of the batches in data.
func baseOffsets(t *testing.T, data []byte) []int64 {
	t.Helper()
	var out []int64
	for len(data) > 0 {
		b, rest, err := record.ReadBatch(data)
		require.NoError(t, err)
		out = append(out, b.BaseOffset())
		data = rest
	}
	return out
}

func fetchAt(t *testing.T, p *Replica, offset int64, o FetchOptions) Fetched {
	t.Helper()
	if o.MaxBytes == 0 {
		o.MaxBytes = 1 << 20
	}
	f, err := p.FetchRecords(context.Background(), offset, o)
	require.NoError(t, err)
	return f
}

// TestPartitionReadCommittedWaitsAtTheLSO: a read_committed fetch gets the
// records below the last stable offset only, and one at the LSO waits
// (while the HW is past it) until the transaction's commit marker lands,
// then gets the transaction's batches and what follows; read_uncommitted
// sees them at once. Markers are never returned.
func TestPartitionReadCommittedWaitsAtTheLSO(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 1<<20)
	v := &verifier{}
	plainProduce(t, p)
	plainProduce(t, p)
	_, err := produceTxn(p, v, 9, 0, 0, 2, t) // offsets 2, 3
	require.NoError(t, err)
	plainProduce(t, p) // 4
	require.EqualValues(t, 5, p.HighWatermark())
	require.EqualValues(t, 2, p.LastStableOffset())
	require.EqualValues(t, 2, p.Status().LSO)

	rc := FetchOptions{ReadCommitted: true}
	f := fetchAt(t, p, 0, rc)
	require.Equal(t, []int64{0, 1}, baseOffsets(t, f.Data))
	require.EqualValues(t, 2, f.Next)
	require.EqualValues(t, 5, f.HW)
	require.EqualValues(t, 2, f.LSO)
	f = fetchAt(t, p, 0, FetchOptions{})
	require.Equal(t, []int64{0, 1, 2, 4}, baseOffsets(t, f.Data), "read_uncommitted sees the open transaction")

	// At the LSO: nothing, after the wait.
	start := time.Now()
	f = fetchAt(t, p, 2, FetchOptions{ReadCommitted: true, Wait: 200 * time.Millisecond})
	require.Empty(t, f.Data)
	require.EqualValues(t, 2, f.Next)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited")

	// A long poll at the LSO proceeds when the commit marker lands.
	done := make(chan Fetched, 1)
	go func() {
		f, err := p.FetchRecords(context.Background(), 2, FetchOptions{MaxBytes: 1 << 20, ReadCommitted: true, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- f
	}()
	off, err := p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1, Commit: true}, 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 5, off)
	select {
	case f = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the read_committed long poll did not proceed after the commit")
	}
	require.Equal(t, []int64{2, 4}, baseOffsets(t, f.Data), "the marker at 5 is not returned")
	require.EqualValues(t, 6, f.Next, "past the marker: the LSO moves once the HW passed it")
	require.EqualValues(t, 6, f.LSO)

	// Only a marker left: nothing returned, and the next offset passes it.
	f = fetchAt(t, p, 5, rc)
	require.Empty(t, f.Data)
	require.EqualValues(t, 6, f.Next)
	f = fetchAt(t, p, 5, FetchOptions{})
	require.Empty(t, f.Data)
	require.EqualValues(t, 6, f.Next)
}

// TestPartitionReadCommittedDropsAborted: read_committed never returns a
// batch of an aborted transaction (raw batches as the broker returns them
// or decodes them), read_uncommitted does; neither returns markers; the
// next offset moves past dropped batches, however small the read.
func TestPartitionReadCommittedDropsAborted(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 1<<20)
	v := &verifier{}
	plainProduce(t, p)                        // 0
	_, err := produceTxn(p, v, 9, 0, 0, 1, t) // 1
	require.NoError(t, err)
	_, err = produceTxn(p, v, 11, 0, 0, 1, t) // 2
	require.NoError(t, err)
	_, err = produceTxn(p, v, 9, 0, 1, 1, t) // 3
	require.NoError(t, err)
	plainProduce(t, p)                                                                                    // 4
	_, err = p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1}, 10*time.Second) // 5: abort
	require.NoError(t, err)
	require.EqualValues(t, 2, p.LastStableOffset(), "producer 11's transaction is open")
	f := fetchAt(t, p, 0, FetchOptions{ReadCommitted: true})
	require.Equal(t, []int64{0}, baseOffsets(t, f.Data), "below the LSO, without the aborted batch at 1")
	require.EqualValues(t, 2, f.Next)
	_, err = p.WriteMarker(context.Background(), Marker{ProducerID: 11, ProducerEpoch: 1, Commit: true}, 10*time.Second) // 6: commit
	require.NoError(t, err)
	plainProduce(t, p) // 7

	f = fetchAt(t, p, 0, FetchOptions{ReadCommitted: true})
	require.Equal(t, []int64{0, 2, 4, 7}, baseOffsets(t, f.Data), "producer 9's aborted batches and the markers are dropped")
	require.EqualValues(t, 8, f.Next)
	f = fetchAt(t, p, 0, FetchOptions{})
	require.Equal(t, []int64{0, 1, 2, 3, 4, 7}, baseOffsets(t, f.Data), "read_uncommitted: no markers")
	require.EqualValues(t, 8, f.Next)

	// One batch at a time: an aborted batch alone moves the offset on.
	var seen []int64
	for off := int64(0); off < 8; {
		f := fetchAt(t, p, off, FetchOptions{ReadCommitted: true, MaxBytes: 1})
		require.Greater(t, f.Next, off, "never stalls at %d", off)
		seen = append(seen, baseOffsets(t, f.Data)...)
		off = f.Next
	}
	require.Equal(t, []int64{0, 2, 4, 7}, seen)
}

// TestPartitionRetentionStopsAtTheLSO: retention never deletes a segment
// holding a batch of an open transaction or one after it (it stays below
// the LSO, not only the HW), and drops the aborted transactions below the
// new log start from the producer state.
func TestPartitionRetentionStopsAtTheLSO(t *testing.T) {
	t.Parallel()
	cfg := TopicConfig{MinISR: 2, RetentionMs: 1000}
	p := open(t, newTestHost(t), cfg)
	appendLog := func(data []byte) {
		t.Helper()
		p.mu.Lock()
		defer p.mu.Unlock()
		_, err := p.log.AppendFollower(data)
		require.NoError(t, err)
		p.applyAppendedLocked(data)
		require.NoError(t, p.log.Roll())
	}
	// Records stamped in 1970, in segments [0, 5) (producer 9's open
	// transaction at 2), [5, 10), then [10, 12) with its abort marker.
	txn, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: 2, LeaderEpoch: 3, Attributes: record.AttrTransactional,
		ProducerID: 9, ProducerEpoch: 0, BaseSequence: 0}, []record.Record{{Value: []byte("t")}})
	require.NoError(t, err)
	appendLog(append(append(batchesOf(t, 0, 2, 3), txn...), batchesOf(t, 3, 2, 3)...))
	appendLog(batchesOf(t, 5, 5, 3))
	p.mu.Lock()
	p.role, p.cfg, p.roleHW = RoleNone, cfg, 10
	p.mu.Unlock()
	require.EqualValues(t, 2, p.LastStableOffset())

	n, err := p.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 0, n, "the open transaction's segment and those after it stay")
	require.EqualValues(t, 0, p.log.LogStartOffset())

	mh, mrecs := record.MarkerBatch(9, 1, 0, record.ControlRecord{Type: record.ControlAbort})
	mh.BaseOffset, mh.LeaderEpoch = 11, 3
	marker, err := record.AppendBatch(nil, mh, mrecs)
	require.NoError(t, err)
	appendLog(append(batchesOf(t, 10, 1, 3), marker...))
	p.mu.Lock()
	p.roleHW = 12
	p.mu.Unlock()
	_, aborted := txnState(p)
	require.Len(t, aborted, 1)
	n, err = p.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 3, n, "once it ended, everything below the HW goes")
	require.EqualValues(t, 12, p.log.LogStartOffset())
	p.mu.Lock()
	require.Empty(t, p.pstate.AbortedTransactions(0, 12), "the aborted list is dropped below the log start")
	p.mu.Unlock()
}

// TestPartitionLSOWaitsForTheMarkersReplication: a transaction ends for
// read_committed readers only once the HW passes its marker (as in
// Kafka): until then the LSO stays at its first offset, so it never goes
// back when another ISR member, which may not have the marker yet, takes
// over.
func TestPartitionLSOWaitsForTheMarkersReplication(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8) // LEO 10, ISR {1, 2, 3}
	followerFetch(t, p, 2, 10, 3)
	followerFetch(t, p, 3, 10, 3)
	waitHW(t, p, 10)
	v := &verifier{}
	_, err := p.ProduceTransactional(context.Background(), []log.ValidBatch{validBatch(t, txnBatch(t, 9, 0, 0, 1))}, sluicev1.Acks_ACKS_LEADER, time.Second, nil, v.verify)
	require.NoError(t, err)
	followerFetch(t, p, 2, 11, 4)
	followerFetch(t, p, 3, 11, 4)
	waitHW(t, p, 11)
	require.EqualValues(t, 10, p.LastStableOffset())

	done := make(chan error, 1)
	go func() {
		_, err := p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1, Commit: true}, 10*time.Second)
		done <- err
	}()
	testenv.Wait(t, 10*time.Second, "the marker appended", func() error {
		if leo := p.log.LEO(); leo != 12 {
			return fmt.Errorf("LEO %d", leo)
		}
		return nil
	})
	require.EqualValues(t, 10, p.LastStableOffset(), "the marker is not committed yet")
	f := fetchAt(t, p, 10, FetchOptions{ReadCommitted: true})
	require.Empty(t, f.Data)

	followerFetch(t, p, 2, 12, 4)
	followerFetch(t, p, 3, 12, 4)
	require.NoError(t, <-done)
	require.EqualValues(t, 12, p.HighWatermark())
	require.EqualValues(t, 12, p.LastStableOffset())
	f = fetchAt(t, p, 10, FetchOptions{ReadCommitted: true})
	require.Equal(t, []int64{10}, baseOffsets(t, f.Data))
	require.EqualValues(t, 12, f.Next)
}
