package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

const (
	growTenant = "01a2316c-bf12-71c1-aeed-6a97ad3d38fa"
	growTopic  = "01a2316c-c0ab-7a02-b332-4a56b485e5ac"
)

// assignments is a snapshot of topic "orders" of growTenant with n
// partitions: those in local are led by broker 1 alone (RF 1), the others
// by broker 2 alone.
func assignments(version int64, n int32, local ...int32) *sluicev1.WatchAssignmentsResponse {
	m := &sluicev1.WatchAssignmentsResponse{MetadataVersion: version}
	for p := range n {
		leader := int32(2)
		for _, l := range local {
			if l == p {
				leader = 1
			}
		}
		m.Partitions = append(m.Partitions, &sluicev1.PartitionAssignment{
			TenantId: growTenant, TopicId: growTopic, TopicName: "orders", Partition: p,
			Replicas: []int32{leader}, Leader: leader, Isr: []int32{leader},
			Config: &sluicev1.TopicConfig{MinInsyncReplicas: ptrTo(int32(1)), MaxMessageBytes: ptrTo(int32(1 << 20))},
		})
	}
	return m
}

func ptrTo[T any](v T) *T { return &v }

// TestBrokerPartitionBeyondViewIsNotFound: a partition the broker's view
// does not have yet is NotFound (retried by clients whose metadata names
// it, as for a topic not heard of yet), not InvalidArgument, which clients
// take as final: partitions added to a topic reach brokers a moment after
// the control plane (and the clients asking it) know them. Once the view
// has it, it resolves.
func TestBrokerPartitionBeyondViewIsNotFound(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	s := b.recordsAPI
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: growTenant})
	b.meta.Store(toClusterMeta(assignments(3, 2)))

	// Every record request resolves its partition first (ListOffsets here).
	_, err := s.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 2, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
	require.ErrorContains(t, err, `topic "orders" partition 2 not found: this broker knows partitions 0..1`)
	_, err = s.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: 2}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
	_, err = s.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 2}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(toConnect(err)), "%v", err)
	_, err = s.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: -1, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)), "a negative partition never exists: %v", err)

	b.meta.Store(toClusterMeta(assignments(4, 3)))
	_, pm, err := b.metadata().Resolve(growTenant, "orders", 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, pm.Partition)
}

// TestBrokerOpensPartitionsAddedToATopic: the assignment snapshot after a
// growth opens a log for each new partition this broker hosts, keeps the
// existing replicas as they are (same replica, same data), and leaves the
// partitions it does not host alone.
func TestBrokerOpensPartitionsAddedToATopic(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()
	// The topic deleted at the end: the broker stops and closes its
	// replicas (and deletes their data).
	defer b.applyMetadata(toClusterMeta(&sluicev1.WatchAssignmentsResponse{MetadataVersion: 9}))

	b.applyMetadata(toClusterMeta(assignments(3, 2, 0)))
	p0 := b.partition(growTopic, 0)
	require.NotNil(t, p0)
	require.Nil(t, b.partition(growTopic, 1), "hosted by broker 2")
	five, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("a")}, {OffsetDelta: 1}, {OffsetDelta: 2}, {OffsetDelta: 3}, {OffsetDelta: 4}})
	require.NoError(t, err)
	_, err = p0.Log().AppendFollower(five)
	require.NoError(t, err)

	// Grown from 2 to 5 partitions; broker 1 hosts 3 and 4 of the new ones.
	b.applyMetadata(toClusterMeta(assignments(4, 5, 0, 3, 4)))
	require.Same(t, p0, b.partition(growTopic, 0), "the existing replica is kept")
	require.EqualValues(t, 5, p0.Log().LEO(), "with its data")
	require.Nil(t, b.partition(growTopic, 2))
	for _, n := range []int32{3, 4} {
		p := b.partition(growTopic, n)
		require.NotNil(t, p, "partition %d is opened", n)
		require.DirExists(t, p.Dir())
		require.EqualValues(t, 0, p.Log().LEO())
		testenv.Wait(t, 10*time.Second, fmt.Sprintf("partition %d to lead", n), func() error {
			if role := p.Status().Role; role != partition.RoleLeader {
				return fmt.Errorf("role %v", role)
			}
			return nil
		})
	}
	require.Len(t, b.metadata().ByID[growTopic].Partitions, 5)
}
