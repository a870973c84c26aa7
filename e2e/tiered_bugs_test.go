package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// Tests of tiered storage from the issue 7 report, which failed before the
// broker was fixed (commit a33ba2e).

// TestTieredCorruptWholeObject: with 1 MiB segments, the broker reads a
// remote .log in one chunk that is the whole object, and every .index
// whole. The S3 server returns the object's stored CRC32 for such GETs
// and the AWS SDK checks it, so a flipped bit is caught by the SDK, and the
// broker answers DataLoss (not Unavailable, a retry) and counts it in
// sluice_tier_corrupt_reads_total (docs/tiered-storage.md: "A fetch that
// hits a damaged object fails with DataLoss"). Usage metering is off
// (noMeteringArgs), so that nothing reads the objects before the test.
func TestTieredCorruptWholeObject(t *testing.T) {
	t.Parallel()
	e := startTier(t, tierOpts{ExtraBrokerArgs: noMeteringArgs})
	ctx := t.Context()
	pl := newPayloads(4 << 10)
	pr := e.newProducer(pl, 0, 64)
	require.NoError(t, pr.produceBytes(ctx, 12<<20))
	records, _, _ := pr.stats()
	r := e.waitHotTail(0, e.c.BrokerIDs(), records-e.tailRecords(pl.size), time.Minute)
	require.GreaterOrEqual(t, len(r.Finished), 5)
	leader := e.leader(0).Leader
	l, err := e.localLog(leader, 0)
	require.NoError(t, err)
	require.Greater(t, l.Start(), r.Finished[3].GetEndOffset(), "segments 0-3 must be in the object store only")

	fetch := func(offset int64) error {
		req := connect.NewRequest(&sluicev1.FetchRequest{Topic: tierTopic, Partition: 0, Offset: offset, MaxBytes: 1})
		testcluster.NoForward(req.Header())
		res, err := e.cl.Records(leader, noGzip).Fetch(ctx, req)
		if err == nil {
			return fmt.Errorf("served %d records", len(res.Msg.GetRecords()))
		}
		return err
	}
	bad := r.Finished[1]
	require.LessOrEqual(t, bad.GetSizeBytes(), int64(1<<20), "segment 1 is read in one chunk")
	_, b0, b1 := readRemoteBatches(t, e, bad)
	e.requireNoColdRead(leader)
	flipByte(t, e.objectPath(bad.GetObjectKey()+".log"), int64(len(b0)+len(b1)/2))
	err = fetch(b1.BaseOffset())
	t.Logf("fetch of the corrupt .log batch: %v", err)
	assert.Equal(t, connect.CodeDataLoss, connect.CodeOf(err), "fetch of a corrupt .log read whole: %v", err)

	flipByte(t, e.objectPath(r.Finished[3].GetObjectKey()+".index"), 3)
	err = fetch(r.Finished[3].GetBaseOffset())
	t.Logf("fetch through the corrupt .index: %v", err)
	assert.Equal(t, connect.CodeDataLoss, connect.CodeOf(err), "fetch through a corrupt .index: %v", err)
	assert.GreaterOrEqual(t, e.mustMetric(leader, "sluice_tier_corrupt_reads_total"), 2.0)
}

// TestTieredOutagePendingBytesAndBackoff: while the S3 server is down,
// sluice_tier_pending_bytes shows the closed segments waiting for their
// copy, and the leader backs off between failed attempts (object-store
// calls that fail: copies, and the sweep a failed copy is followed by)
// instead of trying again every --tier-copy-interval.
func TestTieredOutagePendingBytesAndBackoff(t *testing.T) {
	t.Parallel()
	e := startTier(t, tierOpts{})
	ctx := t.Context()
	pl := newPayloads(4 << 10)
	pr := e.newProducer(pl, 0, 64)
	require.NoError(t, pr.produceBytes(ctx, 8<<20))
	records, _, _ := pr.stats()
	e.waitHotTail(0, e.c.BrokerIDs(), records-e.tailRecords(pl.size), time.Minute)
	leader := e.leader(0).Leader

	e.s3.Stop(t)
	e.c.Mark("S3 server stopped")
	outage := time.Now()
	require.NoError(t, pr.produceBytes(ctx, 3*e.localRetention))
	rowsBefore, err := e.remote(ctx, 0)
	require.NoError(t, err)

	// Failed object-store calls per second over 10 s of outage.
	failed := func() float64 { return e.mustMetric(leader, "sluice_objstore_operations_total", `result="error"`) }
	var perSecond []float64
	prev := failed()
	var pending float64
	for range 10 {
		testenv.Wait(t, 2*time.Second, "a second", func() error {
			if time.Since(outage) < time.Duration(len(perSecond)+2)*time.Second {
				return fmt.Errorf("not yet")
			}
			return nil
		})
		n := failed()
		perSecond = append(perSecond, n-prev)
		prev = n
		pending = max(pending, e.mustMetric(leader, "sluice_tier_pending_bytes"))
	}
	rowsAfter, err := e.remote(ctx, 0)
	require.NoError(t, err)
	var b strings.Builder
	for _, n := range perSecond {
		fmt.Fprintf(&b, "%v ", n)
	}
	t.Logf("failed object-store calls per second during the outage: %s; remote segment rows: %d before, %d after (%d DELETE_STARTED); largest pending bytes seen: %v",
		b.String(), len(rowsBefore.All), len(rowsAfter.All),
		rowsAfter.count(sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED), pending)
	e.s3.Start(t)

	assert.Positive(t, pending, "sluice_tier_pending_bytes during the outage, with %d MiB closed and not copied", 3*e.localRetention>>20)
	var late float64
	for _, n := range perSecond[5:] {
		late += n
	}
	assert.LessOrEqual(t, late, 3.0, "failed object-store calls in the last 5 s of a 12 s outage, with --tier-copy-interval 200ms: no backoff")
}
