package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// TestBrokerGroupLagTransactions: on a partition with transactions, the
// lag (DescribeGroup and the lag metrics alike) is what a read_committed
// consumer at the committed offset can still read: a group caught up to a
// commit marker has lag 0 and lag seconds 0 (not 1 forever); an aborted
// transaction after the committed offset counts neither records nor age;
// an open transaction's records count only once it commits.
func TestBrokerGroupLagTransactions(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	tc := c.clientsOf(0)
	ctx := context.Background()
	p, err := initProducer(t, tc, "lag", 0)
	require.NoError(t, err)
	pid, epoch := p.GetProducerId(), p.GetProducerEpoch()
	// produce writes one transactional batch to partition 0, stamped ts.
	produce := func(ts time.Time, values ...string) {
		t.Helper()
		recs := make([]record.Record, len(values))
		for i, v := range values {
			recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte(v)}
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, FirstTimestamp: ts.UnixMilli(), ProducerID: pid, ProducerEpoch: int16(epoch)}, recs)
		require.NoError(t, err)
		_, err = retry(t, "Produce", func() (*connect.Response[sluicev1.ProduceResponse], error) {
			return tc.records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders", Acks: sluicev1.Acks_ACKS_ALL, TransactionalId: "lag",
				Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b}}}))
		})
		require.NoError(t, err)
	}
	end := func(commit bool) {
		t.Helper()
		res, err := endTxn(t, tc, "lag", pid, epoch, commit)
		require.NoError(t, err)
		pid, epoch = res.GetProducerId(), res.GetProducerEpoch()
	}
	// lag is a group's lag on partition 0 from DescribeGroup and from the
	// lag metrics of its coordinator (computed at the same time), which
	// must agree.
	type lag struct {
		messages int64
		seconds  float64
	}
	lagOf := func(group string) lag {
		t.Helper()
		now := time.Now()
		d, err := c.groups.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: group}))
		require.NoError(t, err)
		var got lag
		for _, pl := range d.Msg.GetPartitions() {
			if pl.GetPartition() == 0 {
				got = lag{pl.GetLag(), pl.GetLagSeconds()}
			}
		}
		coord := c.brokers[c.coordinatorOf(t, group)-1]
		coord.computeGroupLag(ctx, now)
		series, _, _ := lagMetrics(t, coord, c.tenantID)
		k := fmt.Sprintf("%s orders 0", group)
		require.Equal(t, got.messages, int64(series["messages "+k]), "DescribeGroup and the metric %s", k)
		require.InDelta(t, got.seconds, series["seconds "+k], 60, "DescribeGroup and the metric %s", k)
		return got
	}
	twoHours, oneHour := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)

	// Offsets 0-1 committed, the commit marker at 2. caught read both
	// records and committed the offset after them: 2, the marker's.
	produce(twoHours, "a", "b")
	end(true)
	c.commit(t, "caught", map[int32]int64{0: 2})
	require.Equal(t, lag{0, 0}, lagOf("caught"), "caught up to a commit marker")

	// Offset 3 aborted (two hours old), the abort marker at 4. at3 has
	// committed 3, the aborted batch's offset.
	produce(twoHours, "x")
	end(false)
	c.commit(t, "at3", map[int32]int64{0: 3})
	require.Equal(t, lag{0, 0}, lagOf("caught"), "the aborted transaction after the committed offset is not lag")
	require.Equal(t, lag{0, 0}, lagOf("at3"), "nor its age")

	// Offsets 5-6 (an hour old) in an open transaction: not readable yet.
	produce(oneHour, "c", "d")
	require.Equal(t, lag{0, 0}, lagOf("caught"), "an open transaction is not lag")
	// ...but what is committed before it is: behind committed 1, offsets
	// 1 (b) up to the LSO 5 (b, the marker, the aborted x and its marker:
	// an upper bound past the first readable record).
	c.commit(t, "behind", map[int32]int64{0: 1})
	got := lagOf("behind")
	require.EqualValues(t, 4, got.messages)
	require.InDelta(t, time.Since(twoHours).Seconds(), got.seconds, 60)

	// Committed: offsets 5-6 and the marker at 7 are lag now, from the
	// first readable record, 5, an hour old.
	end(true)
	got = lagOf("caught")
	require.EqualValues(t, 3, got.messages, "c, d and their marker")
	require.InDelta(t, time.Since(oneHour).Seconds(), got.seconds, 60)
	c.commit(t, "caught", map[int32]int64{0: 7})
	require.Equal(t, lag{0, 0}, lagOf("caught"))
}
