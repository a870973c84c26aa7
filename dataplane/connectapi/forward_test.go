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

// TestForwardable: a request is forwarded only to another broker whose
// address the view knows, and only when the caller does not route
// itself.
func TestForwardable(t *testing.T) {
	t.Parallel()
	routes := http.Header{NoForwardHeader: []string{"1"}}
	for _, c := range []struct {
		name string
		h    http.Header
		err  error
		want bool
	}{
		{"another broker", http.Header{}, &derr.NotLeaderError{Leader: 2, Epoch: 4, Address: "b2:9092"}, true},
		{"wrapped", http.Header{}, derr.Wrap(derr.NotLeaderOrFollower, &derr.NotLeaderError{Leader: 2, Address: "b2:9092"}), true},
		{"the caller routes itself", routes, &derr.NotLeaderError{Leader: 2, Address: "b2:9092"}, false},
		{"this broker, not taken over yet", http.Header{}, &derr.NotLeaderError{Leader: 1, Self: true, Address: "b1:9092"}, false},
		{"offline", http.Header{}, &derr.NotLeaderError{Leader: -1}, false},
		{"the leader's address is unknown", http.Header{}, &derr.NotLeaderError{Leader: 2, Epoch: 4}, false},
		{"not a NotLeader", http.Header{}, derr.New(derr.Unavailable, "retry"), false},
	} {
		require.Equal(t, c.want, Forwardable(c.h, c.err), c.name)
	}
}

// TestForwardNotToALeaderWithoutAddress: while the view names a group's
// coordinator whose broker left the live list (no address), a call for the
// group is not forwarded (there is nowhere to send it: the client saw "no
// Host in request URL"); the caller gets the NotLeader with the leader
// hint, as a caller that routes itself does.
func TestForwardNotToALeaderWithoutAddress(t *testing.T) {
	t.Parallel()
	view := cluster.EmptyView()
	view.AddTopic(&cluster.Topic{TenantID: system.TenantID, ID: "offsets-id", Name: system.OffsetsTopic, Partitions: []cluster.Partition{{TopicID: "offsets-id", Leader: 2, LeaderEpoch: 3}}})
	svc := groups.New(groups.Config{BrokerID: 1}, groups.Deps{
		View: func() *cluster.View { return view },
		Host: func(_ context.Context, _ *cluster.Topic, pm cluster.Partition, _ func(coordinator.Partition, int32) *coordinator.Coordinator) (*coordinator.Coordinator, error) {
			return nil, view.NotLeader(1, pm)
		},
	})
	forwarded := 0
	h := NewGroups(svc, func(id int32) sluicev1connect.GroupServiceClient {
		t.Errorf("forwarded to broker %d, whose address is unknown", id)
		return nil
	}, func() { forwarded++ })
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})
	req := connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "g", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Offset: 1}}})
	req.Header().Set("Authorization", "Bearer client")
	_, err := h.CommitOffsets(ctx, req)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(connecterr.ToConnect(err)), "%v", err)
	var nl *derr.NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.EqualValues(t, 2, nl.Leader, "the leader hint")
	require.EqualValues(t, 3, nl.Epoch)
	require.Empty(t, nl.Address)
	require.Zero(t, forwarded)
}
