package client

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// notLeaderErr is a broker's NotLeader refusal.
func notLeaderErr(code connect.Code, nl *sluicev1.NotLeader) error {
	ce := connect.NewError(code, errors.New("not the leader"))
	d, err := connect.NewErrorDetail(nl)
	if err != nil {
		panic(err)
	}
	ce.AddDetail(d)
	return ce
}

// TestObserveLeaderHints: observe follows a NotLeader hint only when it is
// about the partition asked for and not older than the cache, and once:
// every other refusal marks the topic's metadata stale, whatever leader
// epoch the cache holds, so the next request relearns the leader from
// metadata (issue 29: a hint about the transaction-state partition, at its
// higher leader epoch, made the producer ignore the real leader's answers
// and never refresh).
func TestObserveLeaderHints(t *testing.T) {
	t.Parallel()
	const topicID = "topic-1"
	hint := func(topic string, partition, leader, epoch int32) *sluicev1.NotLeader {
		return &sluicev1.NotLeader{TopicId: topic, Partition: partition, LeaderId: leader, LeaderAddress: "127.0.0.1:1", LeaderEpoch: epoch}
	}
	type want struct {
		leader, epoch int32
		hinted, stale bool
	}
	for _, tc := range []struct {
		name   string
		cached partitionMeta // partition 1 of the topic, before
		err    error
		want   want
	}{
		{"a hint about the partition, newer", partitionMeta{leader: 1, leaderEpoch: 2},
			notLeaderErr(connect.CodeFailedPrecondition, hint(topicID, 1, 3, 3)), want{3, 3, true, false}},
		{"a hint about the partition, same epoch (taking over)", partitionMeta{leader: 1, leaderEpoch: 2},
			notLeaderErr(connect.CodeUnavailable, hint(topicID, 1, 1, 2)), want{1, 2, true, false}},
		{"a hint from a broker that names no partition (older version)", partitionMeta{leader: 1, leaderEpoch: 2},
			notLeaderErr(connect.CodeFailedPrecondition, hint("", 0, 3, 3)), want{3, 3, true, false}},
		{"a hint about another topic's partition (the transaction-state partition)", partitionMeta{leader: 3, leaderEpoch: 2},
			notLeaderErr(connect.CodeFailedPrecondition, hint("txn-state", 1, 1, 4)), want{3, 2, false, true}},
		{"a hint about another partition of the topic", partitionMeta{leader: 3, leaderEpoch: 2},
			notLeaderErr(connect.CodeFailedPrecondition, hint(topicID, 0, 1, 4)), want{3, 2, false, true}},
		{"a hint older than the cache", partitionMeta{leader: 1, leaderEpoch: 4, hinted: true},
			notLeaderErr(connect.CodeFailedPrecondition, hint(topicID, 1, 3, 2)), want{1, 4, true, true}},
		{"a hint older than the cache, from metadata", partitionMeta{leader: 1, leaderEpoch: 4},
			notLeaderErr(connect.CodeFailedPrecondition, hint(topicID, 1, 3, 2)), want{1, 4, false, true}},
		{"a refusal by the broker a hint named, naming another", partitionMeta{leader: 2, leaderEpoch: 4, hinted: true},
			notLeaderErr(connect.CodeFailedPrecondition, hint(topicID, 1, 3, 5)), want{3, 5, true, true}},
		{"the same hint again (a request sent before it)", partitionMeta{leader: 2, leaderEpoch: 4, hinted: true},
			notLeaderErr(connect.CodeFailedPrecondition, hint(topicID, 1, 2, 4)), want{2, 4, true, false}},
		{"not enough replicas", partitionMeta{leader: 1, leaderEpoch: 2},
			connect.NewError(connect.CodeFailedPrecondition, errors.New("not enough replicas")), want{1, 2, false, true}},
		{"an invalid argument", partitionMeta{leader: 1, leaderEpoch: 2},
			connect.NewError(connect.CodeInvalidArgument, errors.New("bad")), want{1, 2, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &Client{scheme: "http", hc: http.DefaultClient, brokers: map[int32]broker{}, topics: map[string]*topicMeta{
				"orders": {name: "orders", id: topicID, fetched: time.Now(), partitions: []partitionMeta{{leader: 1, leaderEpoch: 7}, tc.cached}},
			}}
			c.observe("orders", 1, tc.err)
			tm := c.topics["orders"]
			got := tm.partitions[1]
			require.Equal(t, tc.want, want{got.leader, got.leaderEpoch, got.hinted, tm.fetched.IsZero()})
			require.Equal(t, partitionMeta{leader: 1, leaderEpoch: 7}, tm.partitions[0], "another partition's routing is not touched")
		})
	}
}

// TestObserveMetadataReplacesHints: a metadata answer replaces a hint,
// even one at a higher leader epoch (a wrong hint is forgotten at the
// next refresh).
func TestObserveMetadataReplacesHints(t *testing.T) {
	t.Parallel()
	c := &Client{scheme: "http", hc: http.DefaultClient, brokers: map[int32]broker{}, topics: map[string]*topicMeta{}}
	md := &sluicev1.GetMetadataResponse{Topics: []*sluicev1.TopicMetadata{{Name: "orders", Id: "topic-1",
		Partitions: []*sluicev1.PartitionMetadata{{Partition: 0, Leader: 3, LeaderEpoch: 2}}}}}
	c.applyMetadata(md)
	c.observe("orders", 0, notLeaderErr(connect.CodeFailedPrecondition, &sluicev1.NotLeader{LeaderId: 1, LeaderAddress: "127.0.0.1:1", LeaderEpoch: 4}))
	require.Equal(t, partitionMeta{leader: 1, leaderEpoch: 4, hinted: true}, c.topics["orders"].partitions[0])
	c.applyMetadata(md)
	require.Equal(t, partitionMeta{leader: 3, leaderEpoch: 2}, c.topics["orders"].partitions[0])
	require.False(t, c.topics["orders"].fetched.IsZero())
}
