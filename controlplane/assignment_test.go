package controlplane_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/tenants/system"
)

// watch opens WatchAssignments for broker id over gRPC (HTTP/2 streaming),
// without deltas: every message is a snapshot.
func (c *cluster) watch(t *testing.T, id int32, epoch int64) *connect.ServerStreamForClient[sluicev1.WatchAssignmentsResponse] {
	t.Helper()
	return c.watchReq(t, &sluicev1.WatchAssignmentsRequest{BrokerId: id, BrokerEpoch: epoch})
}

func (c *cluster) watchReq(t *testing.T, m *sluicev1.WatchAssignmentsRequest) *connect.ServerStreamForClient[sluicev1.WatchAssignmentsResponse] {
	t.Helper()
	client := sluicev1connect.NewBrokerServiceClient(c.streamHC, c.endpoint, connect.WithGRPC())
	req := connect.NewRequest(m)
	req.Header().Set("Authorization", "Bearer "+brokerToken)
	stream, err := client.WatchAssignments(t.Context(), req)
	require.NoError(t, err) // server errors surface on Receive
	t.Cleanup(func() { _ = stream.Close() })
	return stream
}

// receive returns the next message, failing the test on the stream's end.
// receive returns the next snapshot without the internal offsets topic's
// partitions (the control plane creates that topic once brokers are live,
// at a moment the tests do not control).
func receive(t *testing.T, s *connect.ServerStreamForClient[sluicev1.WatchAssignmentsResponse]) *sluicev1.WatchAssignmentsResponse {
	t.Helper()
	if !s.Receive() {
		t.Fatalf("stream ended: %v", s.Err())
	}
	m := s.Msg()
	m.Partitions = slices.DeleteFunc(m.Partitions, func(p *sluicev1.PartitionAssignment) bool { return p.GetTenantId() == system.TenantID })
	return m
}

// streamEnd waits for the stream to end and returns its error.
func streamEnd(t *testing.T, s *connect.ServerStreamForClient[sluicev1.WatchAssignmentsResponse]) error {
	t.Helper()
	for s.Receive() {
	}
	return s.Err()
}

func endpointIDs(bs []*sluicev1.BrokerEndpoint) []int32 {
	var ids []int32
	for _, b := range bs {
		ids = append(ids, b.GetBrokerId())
	}
	return ids
}

// TestControllerWatchAssignments: a broker's stream starts with a snapshot of
// its partitions and the live brokers, follows a leader change with a new
// snapshot, and ends when the broker registers again or the server stops.
func TestControllerWatchAssignments(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		f := newFleet(t, c, 3)
		a := c.signup(t, "watcher")
		ctx := t.Context()
		created, err := c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 3}))
		require.NoError(t, err)
		topicID := created.Msg.GetTopic().GetId()
		// An RF 1 topic: only one broker hosts each partition.
		_, err = c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "solo", PartitionCount: 3, ReplicationFactor: 1}))
		require.NoError(t, err)

		s := c.watch(t, 2, f.epoch(2))
		snap := receive(t, s)
		require.Positive(t, snap.GetMetadataVersion())
		require.Equal(t, []int32{1, 2, 3}, endpointIDs(snap.GetBrokers()))
		require.Equal(t, "127.0.0.1:9102", snap.GetBrokers()[1].GetAddress())
		var orders, solo []*sluicev1.PartitionAssignment
		for _, p := range snap.GetPartitions() {
			require.Equal(t, a.tenantID, p.GetTenantId())
			if p.GetTopicName() == "orders" {
				orders = append(orders, p)
			} else {
				require.Equal(t, "solo", p.GetTopicName())
				require.Len(t, p.GetReplicas(), 1)
				solo = append(solo, p)
			}
		}
		require.Len(t, orders, 3, "every partition of the cluster is in the snapshot")
		require.Len(t, solo, 3, "including those broker 2 does not host")
		for i, p := range orders {
			require.Equal(t, topicID, p.GetTopicId())
			require.EqualValues(t, i, p.GetPartition())
			require.Equal(t, p.GetReplicas()[0], p.GetLeader())
			require.ElementsMatch(t, []int32{1, 2, 3}, p.GetIsr())
			require.Zero(t, p.GetLeaderEpoch())
			require.Zero(t, p.GetPartitionEpoch())
			require.EqualValues(t, 2, p.GetConfig().GetMinInsyncReplicas())
			require.EqualValues(t, 7*24*3600*1000, p.GetConfig().GetRetentionMs())
			require.Positive(t, p.GetConfig().GetMaxMessageBytes())
		}
		ledBy1 := slices.IndexFunc(orders, func(p *sluicev1.PartitionAssignment) bool { return p.GetLeader() == 1 })
		require.GreaterOrEqual(t, ledBy1, 0)

		// Broker 1 dies: snapshots follow until the leader moved. (The
		// controller moves it as the fake time passes; the stream, which
		// polls the store in real time, then catches up.)
		f.kill(1)
		f.until(10*time.Second, "broker 1 gone", c.gone(t, 1))
		deadline := time.Now().Add(10 * time.Second)
		version := snap.GetMetadataVersion()
		for {
			require.True(t, time.Now().Before(deadline), "no snapshot with the new leader")
			snap = receive(t, s)
			require.False(t, snap.GetDelta(), "a broker that did not ask for deltas gets snapshots")
			require.GreaterOrEqual(t, snap.GetMetadataVersion(), version, "versions never go back")
			version = snap.GetMetadataVersion()
			i := slices.IndexFunc(snap.GetPartitions(), func(p *sluicev1.PartitionAssignment) bool {
				return p.GetTopicName() == "orders" && p.GetPartition() == int32(ledBy1)
			})
			require.GreaterOrEqual(t, i, 0)
			p := snap.GetPartitions()[i]
			if p.GetLeader() != 1 && !slices.Contains(endpointIDs(snap.GetBrokers()), 1) {
				require.EqualValues(t, 1, p.GetLeaderEpoch())
				require.Positive(t, p.GetPartitionEpoch())
				require.Equal(t, p.GetReplicas()[1], p.GetLeader())
				break
			}
		}
		require.Equal(t, []int32{2, 3}, endpointIDs(snap.GetBrokers()), "dead brokers are not listed")

		// A stale or unknown broker cannot watch.
		requireCode(t, connect.CodeFailedPrecondition, streamEnd(t, c.watch(t, 3, f.epoch(3)-1)), "stale")
		requireCode(t, connect.CodeNotFound, streamEnd(t, c.watch(t, 42, 1)), "not registered")
		bad := sluicev1connect.NewBrokerServiceClient(c.streamHC, c.endpoint, connect.WithGRPC())
		badStream, err := bad.WatchAssignments(ctx, connect.NewRequest(&sluicev1.WatchAssignmentsRequest{BrokerId: 2, BrokerEpoch: f.epoch(2)}))
		require.NoError(t, err)
		requireCode(t, connect.CodeUnauthenticated, streamEnd(t, badStream))

		// Broker 2 registers again (a restart): the old stream ends.
		f.revive(2)
		requireCode(t, connect.CodeFailedPrecondition, streamEnd(t, s), "stale")

		// A server shutting down ends streams at once, without waiting for
		// the drain timeout.
		s3 := c.watch(t, 3, f.epoch(3))
		receive(t, s3)
		began := time.Now()
		c.stop()
		requireCode(t, connect.CodeUnavailable, streamEnd(t, s3), "shutting down")
		require.Less(t, time.Since(began), 5*time.Second)
	})
}

// TestControllerWatchAssignmentsDeltas: a broker that accepts deltas gets a
// snapshot first, then deltas, each on top of the message before: a
// created topic's partitions (and no others), a leader change (only the
// partitions that changed), a deleted topic's id, and the live brokers.
func TestControllerWatchAssignmentsDeltas(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		f := newFleet(t, c, 3)
		a := c.signup(t, "deltas")
		ctx := t.Context()
		_, err := c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 3}))
		require.NoError(t, err)

		s := c.watchReq(t, &sluicev1.WatchAssignmentsRequest{BrokerId: 2, BrokerEpoch: f.epoch(2), AcceptDeltas: true})
		snap := receive(t, s)
		require.False(t, snap.GetDelta(), "the first message is a snapshot")
		require.Len(t, snap.GetPartitions(), 3)
		version := snap.GetMetadataVersion()
		// next returns the next delta, checking it applies on the message
		// before.
		next := func() *sluicev1.WatchAssignmentsResponse {
			t.Helper()
			d := receive(t, s)
			require.True(t, d.GetDelta(), "after the snapshot: deltas")
			require.Equal(t, version, d.GetBaseVersion(), "each delta applies on the message before")
			require.GreaterOrEqual(t, d.GetMetadataVersion(), version)
			version = d.GetMetadataVersion()
			return d
		}
		names := func(d *sluicev1.WatchAssignmentsResponse) []string {
			var out []string
			for _, p := range d.GetPartitions() {
				out = append(out, fmt.Sprintf("%s/%d", p.GetTopicName(), p.GetPartition()))
			}
			return out
		}

		created, err := c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "more", PartitionCount: 2}))
		require.NoError(t, err)
		var seen []string
		for len(seen) < 2 {
			d := next()
			for _, n := range names(d) {
				require.Contains(t, []string{"more/0", "more/1"}, n, "only the new topic's partitions")
				seen = append(seen, n)
			}
		}
		require.ElementsMatch(t, []string{"more/0", "more/1"}, seen)

		// Broker 1 dies: the partitions it led change, and it leaves the
		// live brokers; "more" partitions it led change too, nothing else.
		f.kill(1)
		f.until(10*time.Second, "broker 1 gone", c.gone(t, 1))
		deadline := time.Now().Add(10 * time.Second)
		for {
			require.True(t, time.Now().Before(deadline), "no delta with broker 1 gone")
			d := next()
			for _, p := range d.GetPartitions() {
				require.Contains(t, p.GetReplicas(), int32(1), "only partitions broker 1 is a replica of change: %s/%d", p.GetTopicName(), p.GetPartition())
			}
			if !slices.Contains(endpointIDs(d.GetBrokers()), 1) {
				require.Equal(t, []int32{2, 3}, endpointIDs(d.GetBrokers()))
				break
			}
		}

		_, err = c.topics(a.token).DeleteTopic(ctx, connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: "more"}))
		require.NoError(t, err)
		deadline = time.Now().Add(10 * time.Second)
		for {
			require.True(t, time.Now().Before(deadline), "no delta with the deleted topic")
			d := next()
			if slices.Contains(d.GetDeletedTopicIds(), created.Msg.GetTopic().GetId()) {
				for _, n := range names(d) {
					require.NotContains(t, []string{"more/0", "more/1"}, n)
				}
				break
			}
		}
	})
}

// alterDetail returns the PartitionAssignment attached to an AlterPartition error.
func alterDetail(t *testing.T, err error) *sluicev1.PartitionAssignment {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if pa, ok := v.(*sluicev1.PartitionAssignment); ok {
			return pa
		}
	}
	t.Fatalf("no PartitionAssignment detail in %v", err)
	return nil
}

// staleDetail returns the StalePartitionEpoch detail of an AlterPartition
// refusal, nil when it has none.
func staleDetail(t *testing.T, err error) *sluicev1.StalePartitionEpoch {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if s, ok := v.(*sluicev1.StalePartitionEpoch); ok {
			return s
		}
	}
	return nil
}

// TestControllerAlterPartition: only the current leader, with current epochs,
// may change the ISR; the new ISR must be well-formed and may only add live
// brokers; a stale partition epoch gets the current state back.
func TestControllerAlterPartition(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		f := newFleet(t, c, 3)
		topicID := c.createTopic(t, "alter", "orders", 1, 3)
		p := c.partitions(t, topicID)[0]
		leader := p.Leader
		follower := p.Replicas[1]
		last := p.Replicas[2]
		ctx := t.Context()
		bs := c.brokers(brokerToken)
		alter := func(broker int32, epoch int64, leaderEpoch, partitionEpoch int32, isr ...int32) (*sluicev1.PartitionAssignment, error) {
			var epochs []*sluicev1.BrokerEpoch
			for _, b := range isr {
				epochs = append(epochs, &sluicev1.BrokerEpoch{BrokerId: b, BrokerEpoch: f.epoch(b)})
			}
			res, err := bs.AlterPartition(ctx, connect.NewRequest(&sluicev1.AlterPartitionRequest{
				BrokerId: broker, BrokerEpoch: epoch, TopicId: topicID, Partition: 0,
				LeaderEpoch: leaderEpoch, PartitionEpoch: partitionEpoch, NewIsr: isr, AddedBrokerEpochs: epochs,
			}))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetPartition(), nil
		}

		// Happy path: the leader shrinks the ISR.
		got, err := alter(leader, f.epoch(leader), 0, 0, leader, follower)
		require.NoError(t, err)
		require.Equal(t, []int32{leader, follower}, got.GetIsr())
		require.EqualValues(t, 1, got.GetPartitionEpoch())
		require.Zero(t, got.GetLeaderEpoch())
		require.Equal(t, leader, got.GetLeader())
		require.Equal(t, topicID, got.GetTopicId())
		require.EqualValues(t, 2, got.GetConfig().GetMinInsyncReplicas())
		stored := c.partitions(t, topicID)[0]
		require.Equal(t, []int32{leader, follower}, stored.ISR)
		require.EqualValues(t, 1, stored.PartitionEpoch)

		// The same ISR again (in another order) changes nothing.
		got, err = alter(leader, f.epoch(leader), 0, 1, follower, leader)
		require.NoError(t, err)
		require.EqualValues(t, 1, got.GetPartitionEpoch())

		// A stale partition epoch: refused with the current state attached.
		_, err = alter(leader, f.epoch(leader), 0, 0, leader)
		requireCode(t, connect.CodeFailedPrecondition, err, "stale partition epoch 0 (current 1)")
		cur := alterDetail(t, err)
		require.EqualValues(t, 1, cur.GetPartitionEpoch())
		require.Equal(t, []int32{leader, follower}, cur.GetIsr())
		// Typed, so a leader need not match the message.
		stale := staleDetail(t, err)
		require.NotNil(t, stale, "a StalePartitionEpoch detail")
		require.EqualValues(t, 0, stale.GetPartitionEpoch())
		require.EqualValues(t, 1, stale.GetCurrentPartitionEpoch())

		// Not the leader; a stale leader epoch; a stale broker epoch.
		_, err = alter(follower, f.epoch(follower), 0, 1, follower)
		requireCode(t, connect.CodeFailedPrecondition, err, "is not the leader")
		require.Equal(t, leader, alterDetail(t, err).GetLeader())
		require.Nil(t, staleDetail(t, err), "only a stale partition epoch has the detail")
		_, err = alter(leader, f.epoch(leader), 7, 1, leader)
		requireCode(t, connect.CodeFailedPrecondition, err, "stale leader epoch 7 (current 0)")
		_, err = alter(leader, f.epoch(leader)-1, 0, 1, leader)
		requireCode(t, connect.CodeFailedPrecondition, err, "stale")
		_, err = alter(99, 1, 0, 1, 99)
		requireCode(t, connect.CodeNotFound, err, "not registered")

		// Malformed ISRs.
		for _, isr := range [][]int32{nil, {follower}, {leader, leader}, {leader, 42}} {
			_, err = alter(leader, f.epoch(leader), 0, 1, isr...)
			requireCode(t, connect.CodeInvalidArgument, err, "new_isr")
		}
		_, err = bs.AlterPartition(ctx, connect.NewRequest(&sluicev1.AlterPartitionRequest{BrokerId: leader, BrokerEpoch: f.epoch(leader), TopicId: "nope", NewIsr: []int32{leader}}))
		requireCode(t, connect.CodeNotFound, err)

		// Adding a dead broker is refused; once it is live again it may join.
		f.kill(last)
		f.until(10*time.Second, "the expected state", func() error {
			if c.live(t, last) {
				return fmt.Errorf("broker %d still live", last)
			}
			return nil
		})
		_, err = alter(leader, f.epoch(leader), 0, 1, leader, follower, last)
		requireCode(t, connect.CodeFailedPrecondition, err, fmt.Sprintf("broker %d is not live", last))
		oldEpoch := f.epoch(last)
		f.revive(last)
		// KIP-903: a catch-up seen under the old incarnation does not count.
		_, err = bs.AlterPartition(ctx, connect.NewRequest(&sluicev1.AlterPartitionRequest{
			BrokerId: leader, BrokerEpoch: f.epoch(leader), TopicId: topicID, Partition: 0, LeaderEpoch: 0, PartitionEpoch: 1,
			NewIsr: []int32{leader, follower, last}, AddedBrokerEpochs: []*sluicev1.BrokerEpoch{{BrokerId: last, BrokerEpoch: oldEpoch}},
		}))
		requireCode(t, connect.CodeFailedPrecondition, err, "it restarted")
		got, err = alter(leader, f.epoch(leader), 0, 1, last, leader, follower)
		require.NoError(t, err)
		require.Equal(t, p.Replicas, got.GetIsr(), "stored in replica order")
		require.EqualValues(t, 2, got.GetPartitionEpoch())

		// Only brokers may call it.
		_, err = c.brokers(operatorToken).AlterPartition(ctx, connect.NewRequest(&sluicev1.AlterPartitionRequest{BrokerId: leader}))
		requireCode(t, connect.CodeUnauthenticated, err)
	})
}

// TestOffsetsTopicCreatedOnceBrokersAreLive: the internal offsets topic
// and the internal transaction-state topic appear in the brokers'
// assignments, owned by the system tenant, once enough brokers are live;
// the system tenant is not listed as a tenant.
func TestOffsetsTopicCreatedOnceBrokersAreLive(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		// On a fake clock nobody moves: the brokers stay live without
		// heartbeats however slowly the machine runs.
		c := startAt(t, dbURL, clock.NewFake(time.Now()), nil, fastController, func(cfg *controlplane.Config) {
			cfg.OffsetsTopicReplicationFactor, cfg.OffsetsTopicPartitions = 3, 4
			cfg.TransactionStateTopicReplicationFactor, cfg.TransactionStateTopicPartitions = 3, 2
		})
		f := newFleet(t, c, 3)
		s := c.watch(t, 1, f.epoch(1))
		deadline := time.Now().Add(15 * time.Second)
		for {
			require.True(t, s.Receive(), "stream ended: %v", s.Err())
			internal := map[string]int{}
			for _, p := range s.Msg().GetPartitions() {
				if p.GetTenantId() == system.TenantID {
					internal[p.GetTopicName()]++
					require.Len(t, p.GetReplicas(), 3)
					require.EqualValues(t, -1, p.GetConfig().GetRetentionMs(), "internal records never expire")
				}
			}
			if len(internal) == 2 {
				require.Equal(t, map[string]int{system.OffsetsTopic: 4, system.TransactionStateTopic: 2}, internal)
				break
			}
			require.True(t, time.Now().Before(deadline), "internal topics so far: %v", internal)
		}
		res, err := c.operator(operatorToken).ListTenants(t.Context(), connect.NewRequest(&sluicev1.ListTenantsRequest{}))
		require.NoError(t, err)
		for _, tn := range res.Msg.GetTenants() {
			require.NotEqual(t, system.TenantID, tn.GetId(), "the system tenant is not listed")
		}
	})
}
