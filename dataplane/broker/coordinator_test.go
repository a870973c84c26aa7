package broker

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/partition"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants/system"
)

func TestOffsetsTopicNamesMatchTheControlPlane(t *testing.T) {
	require.Equal(t, system.TenantID, systemTenantID)
	require.Equal(t, system.OffsetsTopic, offsetsTopic)
}

// groupReason is err's GroupError reason (0: none).
func groupReason(t *testing.T, err error) sluicev1.GroupError_Reason {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ge, ok := v.(*sluicev1.GroupError); ok {
				return ge.GetReason()
			}
		}
	}
	return 0
}

// TestBrokerCoordinatorOnItsReplica: a coordinator on one of this broker's
// partition replicas (offsetsPartition) loads only once the replica leads
// with its HW established, answers a commit only once the ISR has it
// (acks=all through the leader state machine), and once the leadership
// moves on to a new epoch it is no longer current and its writes are
// fenced: refused, nothing appended, nothing applied.
func TestBrokerCoordinatorOnItsReplica(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	tm := &cluster.Topic{TenantID: systemTenantID, ID: "offsets", Name: offsetsTopic, Config: cluster.TopicConfig{MinISR: 2}}
	p, err := b.replicas.Open(tm, cluster.Partition{Partition: 0})
	require.NoError(t, err)
	t.Cleanup(func() { p.Log().Close() })
	// Records [0, 10) replicated at epoch 3: commits of offsets 0..9.
	var data []byte
	for i := range int64(10) {
		k, err := proto.Marshal(&coordinatorv1.GroupRecordKey{TenantId: "t1", Group: "billing", Kind: &coordinatorv1.GroupRecordKey_Offset{Offset: &coordinatorv1.OffsetKey{TopicId: "topic-1", Topic: "orders"}}})
		require.NoError(t, err)
		v, err := proto.Marshal(&coordinatorv1.GroupRecordValue{Offset: &coordinatorv1.CommittedOffset{Topic: "orders", Offset: i}})
		require.NoError(t, err)
		batch, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: i, LeaderEpoch: 3, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, []record.Record{{Key: k, Value: v}})
		require.NoError(t, err)
		data = append(data, batch...)
	}
	_, err = p.Log().AppendFollower(data)
	require.NoError(t, err)
	ctx := t.Context()
	pm := cluster.Partition{Partition: 0, Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}}
	p.Update(ctx, pm.Assignment(), tm.Config.Replica()) // epoch 4 starts at LEO 10
	c := coordinator.New(offsetsPartition{b, p}, coordinator.Config{LeaderEpoch: 4, SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second})
	committed := func() int64 {
		return c.Offsets("t1", "billing")[coordinator.TopicPartition{TopicID: "topic-1"}].Offset.GetOffset()
	}
	require.ErrorIs(t, c.Load(ctx), partition.ErrHWCatchingUp)
	for _, f := range []int32{2, 3} {
		followerFetch(t, b, f, 10, 3)
	}
	waitHW(t, p, 10)
	require.NoError(t, c.Load(ctx))
	require.True(t, c.Current())
	require.EqualValues(t, 9, committed(), "rebuilt from the replica's log")

	commit := func(offset int64) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- c.CommitOffsets(ctx, time.Now(), "t1", "billing", []coordinator.OffsetCommit{{TopicID: "topic-1", Offset: &sluicev1.PartitionOffset{Topic: "orders", Offset: offset}}})
		}()
		return done
	}
	done := commit(3)
	testenv.Wait(t, 10*time.Second, "the commit appended", func() error {
		if leo := p.Log().LEO(); leo != 11 {
			return fmt.Errorf("LEO %d", leo)
		}
		return nil
	})
	followerFetch(t, b, 2, 11, 4)
	select {
	case err := <-done:
		t.Fatalf("answered before 3 had the record: %v", err)
	default:
	}
	require.EqualValues(t, 9, committed(), "applied only once committed")
	followerFetch(t, b, 3, 11, 4)
	require.NoError(t, <-done)
	require.EqualValues(t, 3, committed(), "the later commit in the log wins")

	pm.LeaderEpoch++
	p.Update(ctx, pm.Assignment(), tm.Config.Replica())
	require.False(t, c.Current())
	err = <-commit(4)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(toConnect(err)), "%v", err)
	require.ErrorContains(t, err, "fenced leader epoch 4")
	require.EqualValues(t, 11, p.Log().LEO(), "nothing appended")
	require.EqualValues(t, 3, committed(), "nothing applied")
}

// followerFetch sends follower id's fetch from offset of the offsets
// partition through broker b's ReplicaService handler, as a follower broker
// would, reporting the records below offset durable.
func followerFetch(t *testing.T, b *Broker, id int32, offset int64, lastEpoch int32) {
	t.Helper()
	_, err := b.replicasAPI.FetchReplica(t.Context(), connect.NewRequest(&sluicev1.FetchReplicaRequest{FollowerId: id, FollowerBrokerEpoch: 1,
		TopicId: "offsets", LeaderEpoch: 4, FetchOffset: offset, LastFetchedEpoch: lastEpoch, DurableOffset: &offset, MaxBytes: 1 << 20}))
	require.NoError(t, err)
}

// waitHW waits until p's HW is hw.
func waitHW(t *testing.T, p *partition.Replica, hw int64) {
	t.Helper()
	testenv.Wait(t, 10*time.Second, fmt.Sprintf("HW %d", hw), func() error {
		if got := p.HighWatermark(); got != hw {
			return fmt.Errorf("HW %d", got)
		}
		return nil
	})
}
