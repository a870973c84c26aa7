package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// pollN polls g until it returned n records.
func pollN(t *testing.T, g *client.GroupConsumer, n int) []*client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*client.Record
	for len(out) < n {
		recs, err := g.Poll(ctx)
		require.NoError(t, err, "after %d of %d records", len(out), n)
		out = append(out, recs...)
	}
	return out
}

// A CommitTransactional member never commits by itself: not when Poll
// counts records processed, not at Close; Commit is refused.
// RewindToCommitted moves it back to the group's committed offsets (the
// start offset where there is none), so the records after them are read
// again.
func TestGroupCommitTransactionalAndRewind(t *testing.T) {
	txnIn := fresh("txn-in")
	txnG := fresh("txn-g")
	createTopic(t, txnIn, 1, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: txnIn, Value: fmt.Appendf(nil, "%d", i)}))
	}
	require.NoError(t, p.Close(ctx))

	_, err = c.NewGroupConsumer(ctx, txnG, []string{txnIn}, client.WithCommitMode(client.CommitTransactional()), client.WithDelivery(client.AtMostOnce))
	require.ErrorContains(t, err, "needs AtLeastOnce")

	g, err := c.NewGroupConsumer(ctx, txnG, []string{txnIn}, client.WithCommitMode(client.CommitTransactional()))
	require.NoError(t, err)
	recs := pollN(t, g, 10)
	require.Equal(t, int64(0), recs[0].Offset)
	require.ErrorContains(t, g.Commit(ctx), "committed in transactions")
	m := g.Member()
	require.Equal(t, txnG, m.Group)
	require.NotEmpty(t, m.MemberID)
	require.Positive(t, m.MemberEpoch)

	// Nothing committed: back to the start offset (earliest).
	require.NoError(t, g.RewindToCommitted(ctx))
	again := pollN(t, g, 10)
	require.Equal(t, int64(0), again[0].Offset, "read again from the start")

	// The group's committed offset moves (here by a forced reset): the
	// rewind goes there.
	admin, err := c.GroupAdmin()
	require.NoError(t, err)
	_, err = admin.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: txnG, Topic: txnIn, Offset: 6, Force: true}))
	require.NoError(t, err)
	require.NoError(t, g.RewindToCommitted(ctx))
	again = pollN(t, g, 4)
	require.Equal(t, []int64{6, 7, 8, 9}, offsetsOf(again))

	require.NoError(t, g.Close(ctx))
	res, err := admin.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: txnG}))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetOffsets(), 1)
	require.Equal(t, int64(6), res.Msg.GetOffsets()[0].GetOffset(), "Close committed nothing: the reset's offset stays")
}

func offsetsOf(recs []*client.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}
