package controlplane_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
)

// remoteDetail returns the RemoteSegmentsState attached to an error, or nil.
func remoteDetail(t *testing.T, err error) *sluicev1.RemoteSegmentsState {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if st, ok := v.(*sluicev1.RemoteSegmentsState); ok {
			return st
		}
	}
	return nil
}

const (
	copyStarted   = sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_STARTED
	copyFinished  = sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED
	deleteStarted = sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED
	deleted       = sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETED
)

// TestControlPlaneRemoteSegments: the brokers' remote-segment metadata API.
// The leader adds and finishes copies at the next base offset; the server
// chooses ids and object keys; refusals carry the codes of the contract, the
// base-offset ones the next base offset as a detail; a broker registering
// again loses the partitions it led, and with them the right to copy.
func TestControlPlaneRemoteSegments(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		// On a fake clock that moves only a millisecond per copy: no lease
		// lapses, however slowly the machine runs.
		c := startAt(t, dbURL, clock.NewFake(time.Now()), nil)
		f := newFleet(t, c, 3)
		a := c.signup(t, "tiering")
		other := c.signup(t, "elsewhere")
		ctx := t.Context()
		created, err := c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 2, ReplicationFactor: 3}))
		require.NoError(t, err)
		topicID := created.Msg.GetTopic().GetId()
		p := c.partitions(t, topicID)[0]
		leader, follower := p.Leader, p.Replicas[1]
		if follower == leader {
			follower = p.Replicas[0]
		}
		bs := c.brokers(brokerToken)

		segment := func(base, end int64, leaderEpoch int32) *sluicev1.RemoteSegment {
			return &sluicev1.RemoteSegment{
				TenantId: a.tenantID, TopicId: topicID, Partition: 0,
				BaseOffset: base, EndOffset: end, LeaderEpoch: leaderEpoch,
				SizeBytes: 4096, MaxTimestampMs: 1_700_000_000_000,
				Epochs: []*sluicev1.EpochStart{{Epoch: leaderEpoch, StartOffset: base}},
			}
		}
		add := func(broker int32, brokerEpoch int64, leaderEpoch int32, seg *sluicev1.RemoteSegment) (*sluicev1.RemoteSegment, error) {
			// Each copy starts later than the one before: the list orders
			// copies of one base offset by creation.
			c.clock.Advance(time.Millisecond)
			res, err := bs.AddRemoteSegment(ctx, connect.NewRequest(&sluicev1.AddRemoteSegmentRequest{
				BrokerId: broker, BrokerEpoch: brokerEpoch, LeaderEpoch: leaderEpoch, Segment: seg,
			}))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetSegment(), nil
		}
		update := func(broker int32, brokerEpoch int64, leaderEpoch int32, id string, state sluicev1.RemoteSegmentState) (*sluicev1.RemoteSegment, error) {
			res, err := bs.UpdateRemoteSegment(ctx, connect.NewRequest(&sluicev1.UpdateRemoteSegmentRequest{
				BrokerId: broker, BrokerEpoch: brokerEpoch, LeaderEpoch: leaderEpoch,
				TopicId: topicID, Partition: 0, SegmentId: id, State: state,
			}))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetSegment(), nil
		}
		list := func(partition int32, states ...sluicev1.RemoteSegmentState) []*sluicev1.RemoteSegment {
			t.Helper()
			res, err := bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID, Partition: partition, States: states}))
			require.NoError(t, err)
			return res.Msg.GetSegments()
		}

		// The leader starts a copy; the fields the server sets are ignored.
		req := segment(100, 199, 0)
		req.SegmentId, req.State, req.BrokerId, req.ObjectKey = "mine", deleted, 99, "elsewhere/x"
		s1, err := add(leader, f.epoch(leader), 0, req)
		require.NoError(t, err)
		id, err := uuid.Parse(s1.GetSegmentId())
		require.NoError(t, err)
		require.EqualValues(t, 4, id.Version(), "a random (v4) segment id")
		require.Equal(t, fmt.Sprintf("tenants/%s/topics/%s/0/00000000000000000100-0-%s", a.tenantID, topicID, id), s1.GetObjectKey())
		require.Equal(t, copyStarted, s1.GetState())
		require.Equal(t, leader, s1.GetBrokerId())
		require.Equal(t, a.tenantID, s1.GetTenantId())
		require.Equal(t, topicID, s1.GetTopicId())
		require.EqualValues(t, 100, s1.GetBaseOffset())
		require.EqualValues(t, 199, s1.GetEndOffset())
		require.EqualValues(t, 4096, s1.GetSizeBytes())
		require.EqualValues(t, 1_700_000_000_000, s1.GetMaxTimestampMs())
		require.Len(t, s1.GetEpochs(), 1)
		require.EqualValues(t, 100, s1.GetEpochs()[0].GetStartOffset())
		require.NotNil(t, s1.GetCreateTime())
		require.True(t, proto.Equal(s1.GetCreateTime(), s1.GetUpdateTime()))
		require.Len(t, list(0), 1)
		require.True(t, proto.Equal(s1, list(0)[0]))

		fin, err := update(leader, f.epoch(leader), 0, s1.GetSegmentId(), copyFinished)
		require.NoError(t, err)
		require.Equal(t, copyFinished, fin.GetState())
		again, err := update(leader, f.epoch(leader), 0, s1.GetSegmentId(), copyFinished)
		require.NoError(t, err, "a repeat succeeds")
		require.True(t, proto.Equal(fin, again), "and changes nothing")

		require.True(t, fin.GetCopyFinished())

		// A copy abandoned before it finished never moves where the next
		// one begins; the list says where that is, whatever its filter.
		abandoned, err := add(leader, f.epoch(leader), 0, segment(200, 299, 0))
		require.NoError(t, err)
		require.False(t, abandoned.GetCopyFinished())
		_, err = update(leader, f.epoch(leader), 0, abandoned.GetSegmentId(), deleteStarted)
		require.NoError(t, err)
		for _, states := range [][]sluicev1.RemoteSegmentState{nil, {copyStarted}} {
			res, err := bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID, Partition: 0, States: states}))
			require.NoError(t, err)
			require.EqualValues(t, 200, res.Msg.GetNextBaseOffset(), "states %v", states)
		}
		_, err = update(leader, f.epoch(leader), 0, abandoned.GetSegmentId(), deleted)
		require.NoError(t, err)

		// Gaps and overlaps: FailedPrecondition with the next base offset.
		for _, base := range []int64{0, 150, 199, 201, 300} {
			_, err = add(leader, f.epoch(leader), 0, segment(base, base+99, 0))
			requireCode(t, connect.CodeFailedPrecondition, err, "next base offset 200")
			d := remoteDetail(t, err)
			require.NotNil(t, d, "base %d: no RemoteSegmentsState detail", base)
			require.EqualValues(t, 200, d.GetNextBaseOffset())
		}

		// Fencing: a stale broker epoch, a follower, a stale leader epoch.
		_, err = add(leader, f.epoch(leader)-1, 0, segment(200, 299, 0))
		requireCode(t, connect.CodeFailedPrecondition, err, "stale", "register again")
		require.Nil(t, remoteDetail(t, err))
		_, err = add(follower, f.epoch(follower), 0, segment(200, 299, 0))
		requireCode(t, connect.CodeFailedPrecondition, err, fmt.Sprintf("broker %d is not the leader", follower))
		_, err = add(leader, f.epoch(leader), 5, segment(200, 299, 5))
		requireCode(t, connect.CodeFailedPrecondition, err, "stale leader epoch 5 (current 0)")
		_, err = update(follower, f.epoch(follower), 0, s1.GetSegmentId(), deleteStarted)
		requireCode(t, connect.CodeFailedPrecondition, err, "not the leader")

		// Not found: broker, topic, partition, segment.
		_, err = add(42, 1, 0, segment(200, 299, 0))
		requireCode(t, connect.CodeNotFound, err, "broker 42")
		for _, topic := range []string{uuid.NewString(), "not-a-uuid"} {
			seg := segment(200, 299, 0)
			seg.TopicId = topic
			_, err = add(leader, f.epoch(leader), 0, seg)
			requireCode(t, connect.CodeNotFound, err)
			_, err = bs.UpdateRemoteSegment(ctx, connect.NewRequest(&sluicev1.UpdateRemoteSegmentRequest{
				BrokerId: leader, BrokerEpoch: f.epoch(leader), TopicId: topic, SegmentId: s1.GetSegmentId(), State: deleteStarted,
			}))
			requireCode(t, connect.CodeNotFound, err)
			_, err = bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topic}))
			requireCode(t, connect.CodeNotFound, err)
		}
		seg := segment(200, 299, 0)
		seg.Partition = 7
		_, err = add(leader, f.epoch(leader), 0, seg)
		requireCode(t, connect.CodeNotFound, err, "partition 7")
		_, err = bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID, Partition: 7}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = update(leader, f.epoch(leader), 0, uuid.NewString(), deleteStarted)
		requireCode(t, connect.CodeNotFound, err, "remote segment")

		// Malformed requests.
		for name, mutate := range map[string]func(m *sluicev1.AddRemoteSegmentRequest){
			"segment":                  func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment = nil },
			"segment.tenant_id":        func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.TenantId = "" },
			"segment.tenant_id ":       func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.TenantId = other.tenantID },
			"segment.topic_id":         func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.TopicId = "" },
			"segment.partition":        func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.Partition = -1 },
			"segment.leader_epoch":     func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.LeaderEpoch = 1 },
			"leader_epoch":             func(m *sluicev1.AddRemoteSegmentRequest) { m.LeaderEpoch, m.Segment.LeaderEpoch = -1, -1 },
			"segment.base_offset":      func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.BaseOffset = -1 },
			"segment.end_offset":       func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.EndOffset = 199 },
			"segment.size_bytes":       func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.SizeBytes = 0 },
			"segment.max_timestamp_ms": func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.MaxTimestampMs = -2 },
			"segment.epochs":           func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.Epochs = nil },
			"segment.epochs[0]":        func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.Epochs[0].StartOffset = 201 },
			"segment.epochs[1]": func(m *sluicev1.AddRemoteSegmentRequest) {
				m.Segment.Epochs = append(m.Segment.Epochs, &sluicev1.EpochStart{Epoch: 0, StartOffset: 250})
			},
			"segment.epochs[0] ": func(m *sluicev1.AddRemoteSegmentRequest) { m.Segment.Epochs[0].Epoch = 3 },
		} {
			m := &sluicev1.AddRemoteSegmentRequest{BrokerId: leader, BrokerEpoch: f.epoch(leader), Segment: segment(200, 299, 0)}
			mutate(m)
			_, err = bs.AddRemoteSegment(ctx, connect.NewRequest(m))
			requireCode(t, connect.CodeInvalidArgument, err, strings.TrimSpace(name))
		}
		for name, m := range map[string]*sluicev1.UpdateRemoteSegmentRequest{
			"topic_id":   {SegmentId: s1.GetSegmentId(), State: deleteStarted},
			"partition":  {TopicId: topicID, Partition: -1, SegmentId: s1.GetSegmentId(), State: deleteStarted},
			"segment_id": {TopicId: topicID, State: deleteStarted},
			"state":      {TopicId: topicID, SegmentId: s1.GetSegmentId()},
			"state ":     {TopicId: topicID, SegmentId: s1.GetSegmentId(), State: 9},
		} {
			m.BrokerId, m.BrokerEpoch = leader, f.epoch(leader)
			_, err = bs.UpdateRemoteSegment(ctx, connect.NewRequest(m))
			requireCode(t, connect.CodeInvalidArgument, err, strings.TrimSpace(name))
		}
		_, err = bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID, States: []sluicev1.RemoteSegmentState{copyStarted, 0}}))
		requireCode(t, connect.CodeInvalidArgument, err, "states[1]")
		_, err = bs.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{Partition: 0}))
		requireCode(t, connect.CodeInvalidArgument, err, "topic_id")
		require.Len(t, list(0), 2, "no refused request wrote anything (the finished copy and the abandoned one)")

		// Illegal transitions.
		_, err = update(leader, f.epoch(leader), 0, s1.GetSegmentId(), copyStarted)
		requireCode(t, connect.CodeFailedPrecondition, err, "cannot move")
		_, err = update(leader, f.epoch(leader), 0, s1.GetSegmentId(), deleted)
		requireCode(t, connect.CodeFailedPrecondition, err, "cannot move")
		require.Nil(t, remoteDetail(t, err))

		// Two copies of one range: once one finished, the other cannot,
		// and the refusal says where the remote log continues.
		s2, err := add(leader, f.epoch(leader), 0, segment(200, 299, 0))
		require.NoError(t, err)
		s3, err := add(leader, f.epoch(leader), 0, segment(200, 249, 0))
		require.NoError(t, err)
		require.NotEqual(t, s2.GetObjectKey(), s3.GetObjectKey())
		_, err = update(leader, f.epoch(leader), 0, s3.GetSegmentId(), copyFinished)
		require.NoError(t, err)
		_, err = update(leader, f.epoch(leader), 0, s2.GetSegmentId(), copyFinished)
		requireCode(t, connect.CodeFailedPrecondition, err, "next base offset 250")
		require.EqualValues(t, 250, remoteDetail(t, err).GetNextBaseOffset())

		// Clean-up and retention.
		_, err = update(leader, f.epoch(leader), 0, s2.GetSegmentId(), deleteStarted)
		require.NoError(t, err)
		_, err = update(leader, f.epoch(leader), 0, s1.GetSegmentId(), deleteStarted)
		require.NoError(t, err)
		_, err = update(leader, f.epoch(leader), 0, s1.GetSegmentId(), deleted)
		require.NoError(t, err)

		ids := func(segs []*sluicev1.RemoteSegment) []string {
			var out []string
			for _, s := range segs {
				out = append(out, s.GetSegmentId())
			}
			return out
		}
		require.Equal(t, []string{s1.GetSegmentId(), abandoned.GetSegmentId(), s2.GetSegmentId(), s3.GetSegmentId()}, ids(list(0)), "base-offset order, then creation")
		require.Equal(t, []string{s3.GetSegmentId()}, ids(list(0, copyFinished)))
		require.Equal(t, []string{s1.GetSegmentId(), abandoned.GetSegmentId(), s2.GetSegmentId()}, ids(list(0, deleted, deleteStarted)))
		require.Empty(t, list(0, copyStarted))
		require.Empty(t, list(1))

		// The leader registers again (a restart): its partitions fail over
		// at a new leader epoch, and it may copy no more.
		f.revive(leader)
		p = c.partitions(t, topicID)[0]
		require.NotEqual(t, leader, p.Leader)
		require.EqualValues(t, 1, p.LeaderEpoch)
		_, err = add(leader, f.epoch(leader), 0, segment(250, 299, 0))
		requireCode(t, connect.CodeFailedPrecondition, err, "not the leader")
		_, err = add(leader, f.epoch(leader), 1, segment(250, 299, 1))
		requireCode(t, connect.CodeFailedPrecondition, err, "not the leader")
		s4, err := add(p.Leader, f.epoch(p.Leader), 1, segment(250, 299, 1))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("tenants/%s/topics/%s/0/00000000000000000250-1-%s", a.tenantID, topicID, s4.GetSegmentId()), s4.GetObjectKey())
		_, err = update(p.Leader, f.epoch(p.Leader), 1, s4.GetSegmentId(), copyFinished)
		require.NoError(t, err)

		// Only the broker credential opens the service.
		for _, token := range []string{a.token, operatorToken, ""} {
			client := c.brokers(token)
			_, err = client.ListRemoteSegments(ctx, connect.NewRequest(&sluicev1.ListRemoteSegmentsRequest{TopicId: topicID}))
			requireCode(t, connect.CodeUnauthenticated, err)
			_, err = client.AddRemoteSegment(ctx, connect.NewRequest(&sluicev1.AddRemoteSegmentRequest{BrokerId: p.Leader, Segment: segment(300, 399, 1)}))
			requireCode(t, connect.CodeUnauthenticated, err)
			_, err = client.UpdateRemoteSegment(ctx, connect.NewRequest(&sluicev1.UpdateRemoteSegmentRequest{TopicId: topicID, SegmentId: s4.GetSegmentId(), State: deleteStarted}))
			requireCode(t, connect.CodeUnauthenticated, err)
		}
	})
}
