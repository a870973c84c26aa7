package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/internal/testenv"
)

// TestOffsetDelete: OffsetDelete (kadm.DeleteOffsets) deletes a group's
// committed offsets of the topics its members do not subscribe to, and
// refuses those of a topic they do (GROUP_SUBSCRIBED_TO_TOPIC, per
// partition), with a member of either protocol: classic (its subscription
// read from its consumer-protocol metadata) and KIP-848. Once the member
// left, the subscribed topic's offsets go too. An unknown topic is
// UNKNOWN_TOPIC_OR_PARTITION, an unknown group GROUP_ID_NOT_FOUND.
func TestOffsetDelete(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	adm := kadm.NewClient(client(t))
	base := fmt.Sprintf("offdel-%d", time.Now().UnixNano())
	consumed, other := base+"-consumed", base+"-other"
	createTopic(t, adm, consumed, 2)
	createTopic(t, adm, other, 1)
	seed := client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, topic := range []string{consumed, other} {
		for p := range int32(2) {
			if topic == other && p == 1 {
				continue
			}
			require.NoError(t, seed.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")}, &kgo.Record{Topic: topic, Partition: p, Value: []byte("y")}).FirstErr())
		}
	}

	for _, kind := range []struct {
		name string
		opt  kgo.Opt
		ok   string // the group's state with the member in it
	}{
		{"classic", kgo.Balancers(kgo.CooperativeStickyBalancer()), "Stable"},
		{"KIP-848", kgo.ServerSideBalancer(), ""},
	} {
		t.Run(kind.name, func(t *testing.T) {
			group := base + "-" + kind.name
			offsets := kadm.Offsets{}
			offsets.Add(kadm.Offset{Topic: consumed, Partition: 0, At: 1})
			offsets.Add(kadm.Offset{Topic: consumed, Partition: 1, At: 2})
			offsets.Add(kadm.Offset{Topic: other, Partition: 0, At: 2})
			committed, err := adm.CommitOffsets(ctx, group, offsets)
			require.NoError(t, err)
			require.NoError(t, committed.Error())

			member := client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(consumed), kgo.DisableAutoCommit(), kind.opt)
			go member.PollFetches(ctx)
			testenv.Wait(t, time.Minute, "the member in the group", func() error {
				switch kind.ok {
				case "":
					gs, err := adm.DescribeConsumerGroups(ctx, group)
					if err != nil {
						return err
					}
					if g := gs[group]; len(g.Members) != 1 {
						return fmt.Errorf("%d members (%v)", len(g.Members), g.Err)
					}
				default:
					gs, err := adm.DescribeGroups(ctx, group)
					if err != nil {
						return err
					}
					if g := gs[group]; g.State != kind.ok || len(g.Members) != 1 {
						return fmt.Errorf("group %s, %d members", g.State, len(g.Members))
					}
				}
				return nil
			})

			res, err := adm.DeleteOffsets(ctx, group, kadm.TopicsSet{consumed: {0: {}, 1: {}}, other: {0: {}}, base + "-none": {0: {}}})
			require.NoError(t, err)
			require.ErrorIs(t, res[consumed][0], kerr.GroupSubscribedToTopic)
			require.ErrorIs(t, res[consumed][1], kerr.GroupSubscribedToTopic)
			require.NoError(t, res[other][0])
			require.ErrorIs(t, res[base+"-none"][0], kerr.UnknownTopicOrPartition)
			fetched, err := adm.FetchOffsets(ctx, group)
			require.NoError(t, err)
			_, ok := fetched.Lookup(other, 0)
			require.False(t, ok, "the other topic's offset is deleted")
			o, ok := fetched.Lookup(consumed, 1)
			require.True(t, ok, "the subscribed topic's offsets stay")
			require.EqualValues(t, 2, o.At)

			member.Close() // leaves the group
			testenv.Wait(t, time.Minute, "the subscribed topic's offsets deleted once the member left", func() error {
				res, err := adm.DeleteOffsets(ctx, group, kadm.TopicsSet{consumed: {0: {}, 1: {}}})
				if err != nil {
					return err
				}
				return res.Error()
			})
			fetched, err = adm.FetchOffsets(ctx, group)
			require.NoError(t, err)
			require.Empty(t, fetched.Offsets().Sorted(), "no offsets left")
		})
	}

	_, err := adm.DeleteOffsets(ctx, base+"-never", kadm.TopicsSet{other: {0: {}}})
	require.ErrorIs(t, err, kerr.GroupIDNotFound)
}
