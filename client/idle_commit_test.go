package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TestGroupIdleConsumerCommitsAtItsInterval: a member that caught up and
// has nothing more to read still commits what it processed once its
// commit interval is up (Kafka's auto-commit runs in poll, which returns
// after its timeout); it used to wait for the next record, leaving the
// group lagging, and a crash replaying, for as long as the topic was idle.
func TestGroupIdleConsumerCommitsAtItsInterval(t *testing.T) {
	topic, group := fresh("idle"), fresh("idle-group")
	const n = 10
	createTopic(t, topic, 1, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(context.Background())
	var recs []*client.Record
	for i := range n {
		recs = append(recs, &client.Record{Topic: topic, Value: fmt.Appendf(nil, "%d", i)})
	}
	require.NoError(t, p.ProduceSync(ctx, recs...))

	gc, err := c.NewGroupConsumer(ctx, group, []string{topic}, client.WithCommitMode(client.CommitInterval(300*time.Millisecond)))
	require.NoError(t, err)
	defer gc.Close(context.Background())
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var processed atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- gc.Run(rctx, func(context.Context, *client.Record) error {
			processed.Add(1)
			return nil
		})
	}()
	admin, err := c.GroupAdmin()
	require.NoError(t, err)
	testenv.Wait(t, 30*time.Second, "every record committed while the member idles", func() error {
		res, err := admin.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: group}))
		if err != nil {
			return err
		}
		if got := res.Msg.GetOffsets(); processed.Load() != n || len(got) != 1 || got[0].GetOffset() != n {
			return fmt.Errorf("processed %d, committed %v", processed.Load(), got)
		}
		return nil
	})
	stop()
	require.NoError(t, <-done)
}
