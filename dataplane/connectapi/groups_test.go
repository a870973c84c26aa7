package connectapi

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/groups"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// coordinatorClient is the GroupService of the group's coordinator: it
// records what it is sent.
type coordinatorClient struct {
	sluicev1connect.GroupServiceClient
	headers []http.Header
}

func (c *coordinatorClient) CommitOffsets(_ context.Context, req *connect.Request[sluicev1.CommitOffsetsRequest]) (*connect.Response[sluicev1.CommitOffsetsResponse], error) {
	c.headers = append(c.headers, req.Header().Clone())
	return connect.NewResponse(&sluicev1.CommitOffsetsResponse{}), nil
}

// TestGroupsForwardsToTheCoordinator: a call whose group another broker
// coordinates is sent on once to that broker, with the caller's
// credential and the no-forward mark, and counted; a caller that routes
// itself gets the NotLeader naming the coordinator instead.
func TestGroupsForwardsToTheCoordinator(t *testing.T) {
	t.Parallel()
	view := cluster.EmptyView()
	view.Brokers[2] = cluster.Node{ID: 2, Address: "b2:9092"}
	view.AddTopic(&cluster.Topic{TenantID: system.TenantID, ID: "offsets-id", Name: system.OffsetsTopic, Partitions: []cluster.Partition{{TopicID: "offsets-id", Leader: 2, LeaderEpoch: 1}}})
	svc := groups.New(groups.Config{BrokerID: 1}, groups.Deps{
		View: func() *cluster.View { return view },
		Host: func(_ context.Context, _ *cluster.Topic, pm cluster.Partition, _ func(coordinator.Partition, int32) *coordinator.Coordinator) (*coordinator.Coordinator, error) {
			return nil, view.NotLeader(1, pm)
		},
	})
	peer := &coordinatorClient{}
	var peers []int32
	forwarded := 0
	h := NewGroups(svc, func(id int32) sluicev1connect.GroupServiceClient { peers = append(peers, id); return peer }, func() { forwarded++ })
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})

	req := connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "g", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Offset: 1}}})
	req.Header().Set("Authorization", "Bearer client")
	_, err := h.CommitOffsets(ctx, req)
	require.NoError(t, err)
	require.Equal(t, []int32{2}, peers)
	require.Equal(t, 1, forwarded)
	require.Len(t, peer.headers, 1)
	require.Equal(t, "Bearer client", peer.headers[0].Get("Authorization"))
	require.Equal(t, "1", peer.headers[0].Get(NoForwardHeader))

	req.Header().Set(NoForwardHeader, "1")
	_, err = h.CommitOffsets(ctx, req)
	ce := connecterr.ToConnect(err)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(ce), "%v", err)
	var nl *derr.NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.Equal(t, "b2:9092", nl.Address)
	require.Equal(t, 1, forwarded, "not forwarded")
}
