package e2e

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// TestGroupCommittedOffsetsSurviveCoordinatorKill commits offsets, SIGKILLs the
// group's coordinator, and reads them back from the new one (rebuilt from
// the replicated offsets partition); then again after every broker was
// SIGKILLed and restarted.
func TestGroupCommittedOffsetsSurviveCoordinatorKill(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t)})
	tc := c.NewClient(t, "acme", "orders", 3, 2)
	ctx := t.Context()

	cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	defer cl.Close()
	p, err := cl.NewProducer(ctx, client.WithManualPartitioner())
	require.NoError(t, err)
	for part := range int32(3) {
		for range 10 {
			require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: "orders", Partition: part, Value: []byte("x")}))
		}
	}
	require.NoError(t, p.Close(ctx))

	var hp http.Protocols
	hp.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &hp}}
	tok, err := sluicev1connect.NewAuthServiceClient(hc, c.ControlPlane()).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: tc.APIKey}))
	require.NoError(t, err)
	auth := connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))
	groups := func(id int32) sluicev1connect.GroupServiceClient {
		return sluicev1connect.NewGroupServiceClient(hc, "http://"+c.Broker(id).Advertised(), auth)
	}
	// any live broker forwards to the coordinator
	call := func(what string, fn func(sluicev1connect.GroupServiceClient) error) {
		testenv.Wait(t, 30*time.Second, what, func() error {
			var last error
			for _, id := range c.BrokerIDs() {
				if last = fn(groups(id)); last == nil {
					return nil
				}
			}
			return last
		})
	}
	var coordinator int32
	call("a coordinator", func(g sluicev1connect.GroupServiceClient) error {
		res, err := g.FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "billing"}))
		if err == nil {
			coordinator = res.Msg.GetBrokerId()
		}
		return err
	})
	want := []*sluicev1.PartitionOffset{
		{Topic: "orders", Partition: 0, Offset: 7, LeaderEpoch: 0, Metadata: "a"},
		{Topic: "orders", Partition: 1, Offset: 10, LeaderEpoch: 0},
		{Topic: "orders", Partition: 2, Offset: 3, LeaderEpoch: 0},
	}
	call("commit", func(g sluicev1connect.GroupServiceClient) error {
		_, err := g.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "billing", Offsets: want}))
		return err
	})
	check := func(when string) {
		call("fetch "+when, func(g sluicev1connect.GroupServiceClient) error {
			res, err := g.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: "billing"}))
			if err != nil {
				return err
			}
			require.Len(t, res.Msg.GetOffsets(), 3, when)
			for i, o := range res.Msg.GetOffsets() {
				require.Equal(t, want[i].GetOffset(), o.GetOffset(), when)
				require.Equal(t, want[i].GetMetadata(), o.GetMetadata(), when)
			}
			return nil
		})
	}
	check("before")

	c.Kill(coordinator)
	check("after the coordinator was killed")
	var next int32
	call("the new coordinator", func(g sluicev1connect.GroupServiceClient) error {
		res, err := g.FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "billing"}))
		if err == nil {
			next = res.Msg.GetBrokerId()
		}
		return err
	})
	require.NotEqual(t, coordinator, next)

	c.Restart(coordinator, false)
	c.WaitLive(c.BrokerIDs()...)
	for _, id := range c.BrokerIDs() {
		c.Kill(id)
	}
	for _, id := range c.BrokerIDs() {
		c.Restart(id, false)
	}
	c.WaitLive(c.BrokerIDs()...)
	check("after every broker was killed and restarted")
}
