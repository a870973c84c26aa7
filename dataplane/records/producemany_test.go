package records

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/record"
)

// TestRecordsProduceManyGroups: entries are grouped by partition, each
// partition's in request order, partitions in the order of their first
// entry.
func TestRecordsProduceManyGroups(t *testing.T) {
	t.Parallel()
	e := func(topic string, p int32) ProduceEntry { return ProduceEntry{Topic: topic, Partition: p} }
	require.Equal(t, [][]int{{0, 3}, {1, 5}, {2}, {4}},
		partitionsOf([]ProduceEntry{e("a", 0), e("a", 1), e("b", 0), e("a", 0), e("b", 1), e("a", 1)}))
	require.Empty(t, partitionsOf(nil))
}

// TestRecordsProduceManyBounds: a request with no entries, too many, or
// too many bytes, or with a bad acks or timeout, is refused whole and
// charged nothing; entries of one partition are written in request order.
func TestRecordsProduceManyBounds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	one := ProduceEntry{Topic: "bench", Batches: batch(t, 1, -1, 0, 0)}
	many := make([]ProduceEntry, MaxProduceManyEntries+1)
	for i := range many {
		many[i] = one
	}
	big := ProduceEntry{Topic: "bench", Batches: make([]byte, MaxProduceManyBytes/2+1)}
	for _, tc := range []struct {
		name, msg string
		req       ProduceManyRequest
	}{
		{"empty", "partitions: must not be empty", ProduceManyRequest{}},
		{"too many entries", "partitions: at most 4096 per request; got 4097", ProduceManyRequest{Entries: many}},
		{"too many bytes", fmt.Sprintf("partitions: at most 67108864 bytes of batches per request; got %d", MaxProduceManyBytes+2), ProduceManyRequest{Entries: []ProduceEntry{big, big}}},
		{"acks", "acks: unknown value 9", ProduceManyRequest{Acks: 9, Entries: []ProduceEntry{one}}},
		{"timeout", "timeout_ms: must not be negative", ProduceManyRequest{Timeout: -1, Entries: []ProduceEntry{one}}},
	} {
		_, err := f.svc.ProduceMany(f.ctx, tc.req, nil)
		require.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%s: %v", tc.name, err)
		require.EqualError(t, err, tc.msg, tc.name)
	}
	require.Zero(t, f.p.Log().LEO(), "nothing written")
	require.Empty(t, f.quotas.take(), "nothing charged")

	entries := make([]ProduceEntry, 20)
	for i := range entries {
		entries[i] = ProduceEntry{Topic: "bench", Batches: batch(t, 2, -1, 0, 0)}
	}
	res, err := f.svc.ProduceMany(f.ctx, ProduceManyRequest{Acks: AcksLeader, Entries: entries}, nil)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err)
		require.EqualValues(t, 2*i, r.BaseOffset)
	}
}

// TestRecordsProduceManyRefunds: a request is admitted whole, once; an
// entry refused before it reaches the log (an unknown topic, invalid
// batches, a partition another broker leads, which is never forwarded) is
// refunded its bytes; an entry the log took is settled by its answer.
// Each entry's error is the one a Produce of it alone answers. A request
// over the quota writes nothing.
func TestRecordsProduceManyRefunds(t *testing.T) {
	t.Parallel()
	f := setup(t)
	good, dup := batch(t, 2, 7, 0, 0), batch(t, 2, 7, 0, 0)
	bad := corrupt(batch(t, 1, -1, 0, 0))
	txn := batch(t, 1, 8, 0, record.AttrTransactional)
	entries := []ProduceEntry{
		{Topic: "bench", Batches: good},
		{Topic: "nope", Batches: good},
		{Topic: "bench", Batches: bad},
		{Topic: "bench", Batches: dup},
		{Topic: "bench"},
		{Topic: "bench", Batches: txn}, // no transactional id
	}
	size := 0
	for _, e := range entries {
		size += len(e.Batches)
	}
	res, err := f.svc.ProduceMany(f.ctx, ProduceManyRequest{Entries: entries}, nil)
	require.NoError(t, err)
	require.Len(t, res, len(entries))
	require.NoError(t, res[0].Err)
	require.EqualError(t, res[1].Err, `topic "nope" not found`)
	require.ErrorIs(t, res[1].Err, derr.UnknownTopicOrPartition)
	require.ErrorContains(t, res[2].Err, "batches: batch 1:")
	require.Equal(t, connect.CodeInvalidArgument, codeOf(res[2].Err))
	require.NoError(t, res[3].Err)
	require.True(t, res[3].Duplicate, "entries of a partition in request order: the retry follows the write")
	require.EqualError(t, res[4].Err, "batches: must not be empty")
	require.EqualError(t, res[5].Err, "batches: batch 1 has the transactional attribute: transactional_id must be set (the producer's, from InitProducerId)")
	for i := range entries {
		if res[i].Err == nil {
			continue
		}
		_, want := f.svc.Produce(f.ctx, ProduceRequest{Topic: entries[i].Topic, Payload: BatchPayload(entries[i].Batches)}, nil)
		if len(entries[i].Batches) == 0 {
			_, want = f.svc.Produce(f.ctx, ProduceRequest{Topic: entries[i].Topic, Payload: BatchPayload(nil)}, nil)
		}
		require.Equal(t, want.Error(), res[i].Err.Error(), "entry %d answers as a Produce of it", i)
		require.Equal(t, codeOf(want), codeOf(res[i].Err), "entry %d", i)
	}
	calls := f.quotas.take()
	require.Equal(t, fmt.Sprintf("admit %d", size), calls[0])
	require.ElementsMatch(t, []string{
		fmt.Sprintf("settle 1 batches %d bytes duplicate=false err=false", len(good)),
		fmt.Sprintf("refund %d", len(good)), // unknown topic
		fmt.Sprintf("refund %d", len(bad)),
		fmt.Sprintf("settle 1 batches %d bytes duplicate=true err=false", len(dup)),
		"refund 0",
		fmt.Sprintf("refund %d", len(txn)),
	}, calls[1:], "the Produce calls above are refused before any quota call")
	require.EqualValues(t, 2, f.p.Log().LEO())

	// Another broker leads: every entry answers NotLeader, refunded,
	// never forwarded.
	f.view.Store(benchView(2, 1<<20))
	one := batch(t, 1, -1, 0, 0)
	res, err = f.svc.ProduceMany(f.ctx, ProduceManyRequest{Entries: []ProduceEntry{{Topic: "bench", Batches: one}}}, nil)
	require.NoError(t, err)
	leader, ok := LeaderElsewhere(res[0].Err)
	require.True(t, ok)
	require.EqualValues(t, 2, leader)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(res[0].Err))
	require.Equal(t, []string{fmt.Sprintf("admit %d", len(one)), fmt.Sprintf("refund %d", len(one))}, f.quotas.take())

	f.quotas.admitErr = derr.New(derr.ResourceExhausted, "over the quota")
	f.view.Store(benchView(1, 1<<20))
	_, err = f.svc.ProduceMany(f.ctx, ProduceManyRequest{Entries: []ProduceEntry{{Topic: "bench", Batches: one}}}, nil)
	require.ErrorIs(t, err, derr.ResourceExhausted)
	require.EqualValues(t, 2, f.p.Log().LEO(), "nothing written")
}
