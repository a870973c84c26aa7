package controlplane_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/tenants"
)

// TestControlPlaneCreatePartitions: a topic grows to the requested total;
// the existing partitions are untouched and the new ones are placed
// rack-aware counting the load the brokers already hold; the brokers'
// assignment streams carry them, and the controller treats them like any
// partition. Every refusal answers its own code and changes nothing.
func TestControlPlaneCreatePartitions(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		// Brokers 1..4 in racks b, c, a, b: every partition of RF 3 has
		// one replica in each rack.
		f := newFleet(t, c, 4)
		rack := func(id int32) rune { return rune('a' + id%3) }
		ctx := t.Context()
		a := c.signup(t, "grower")
		bob := c.signup(t, "bob")
		tc := c.topics(a.token)
		grow := func(token, name string, n int32) (*sluicev1.CreatePartitionsResponse, error) {
			res, err := c.topics(token).CreatePartitions(ctx, connect.NewRequest(&sluicev1.CreatePartitionsRequest{Name: name, PartitionCount: n}))
			if err != nil {
				return nil, err
			}
			return res.Msg, nil
		}

		created, err := tc.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 3}))
		require.NoError(t, err)
		topicID := created.Msg.GetTopic().GetId()
		before := created.Msg.GetPartitions()
		// One broker leads none of the three partitions (placed alone, one
		// more partition would go to broker 1, the first in the order).
		idle := int32(-1)
		for id := int32(1); id <= 4; id++ {
			if !slices.ContainsFunc(before, func(p *sluicev1.PartitionInfo) bool { return p.GetLeader() == id }) {
				idle = id
			}
		}
		require.NotEqual(t, int32(1), idle)
		s := c.watch(t, 2, f.epoch(2))
		require.Len(t, receive(t, s).GetPartitions(), 3)

		// 3 → 4: the idle broker leads the new partition (placement counts
		// the existing load).
		res, err := grow(a.token, "orders", 4)
		require.NoError(t, err)
		require.EqualValues(t, 4, res.GetTopic().GetPartitionCount())
		require.Equal(t, topicID, res.GetTopic().GetId())
		require.True(t, res.GetTopic().GetUpdateTime().AsTime().After(created.Msg.GetTopic().GetCreateTime().AsTime().Add(-time.Millisecond)))
		require.Len(t, res.GetPartitions(), 4)
		for i, p := range before {
			require.True(t, proto.Equal(p, res.GetPartitions()[i]), "partition %d untouched: %v, was %v", i, res.GetPartitions()[i], p)
		}
		require.Equal(t, idle, res.GetPartitions()[3].GetLeader(), "the new partition goes to the broker leading least")

		// 4 → 8: the leaders even out (2 each), every new partition spans
		// the three racks, starts led by its first replica with every
		// replica in sync, at epoch 0.
		res, err = grow(a.token, "orders", 8)
		require.NoError(t, err)
		require.Len(t, res.GetPartitions(), 8)
		perLeader := map[int32]int{}
		for i, p := range res.GetPartitions() {
			require.EqualValues(t, i, p.GetPartition())
			perLeader[p.GetLeader()]++
			if i < 3 {
				require.True(t, proto.Equal(before[i], p), "partition %d untouched", i)
				continue
			}
			require.Len(t, p.GetReplicas(), 3)
			racks := map[rune]bool{}
			for _, r := range p.GetReplicas() {
				racks[rack(r)] = true
			}
			require.Len(t, racks, 3, "partition %d spans the racks: %v", i, p.GetReplicas())
			require.Equal(t, p.GetReplicas()[0], p.GetLeader())
			require.Equal(t, p.GetReplicas(), p.GetIsr())
			require.Zero(t, p.GetLeaderEpoch())
		}
		require.Equal(t, map[int32]int{1: 2, 2: 2, 3: 2, 4: 2}, perLeader, "leaders spread over the brokers")

		desc, err := tc.DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		require.NoError(t, err)
		require.EqualValues(t, 8, desc.Msg.GetTopic().GetPartitionCount())
		require.True(t, proto.Equal(desc.Msg, &sluicev1.DescribeTopicResponse{Topic: res.GetTopic(), Partitions: res.GetPartitions()}))
		me, err := c.tenants(a.token).GetTenant(ctx, connect.NewRequest(&sluicev1.GetTenantRequest{}))
		require.NoError(t, err)
		require.EqualValues(t, 8, me.Msg.GetUsage().GetPartitions())
		// The metadata clients route by and the brokers' assignments follow.
		md, err := sluicev1connect.NewRecordServiceClient(c.hc, c.endpoint, bearer(a.token)).GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"orders"}}))
		require.NoError(t, err)
		require.Len(t, md.Msg.GetTopics()[0].GetPartitions(), 8)
		deadline := time.Now().Add(10 * time.Second)
		for {
			snap := receive(t, s)
			if len(snap.GetPartitions()) == 8 {
				break
			}
			require.True(t, time.Now().Before(deadline), "no snapshot with 8 partitions; last %d", len(snap.GetPartitions()))
		}

		// Refusals: each with its code, none changes the topic.
		for _, tt := range []struct {
			name  string
			token string
			topic string
			n     int32
			code  connect.Code
			msg   string
		}{
			{"equal", a.token, "orders", 8, connect.CodeInvalidArgument, `topic "orders" has 8 partitions; partitions can be added but never removed, so the new count must be more than 8; got 8`},
			{"fewer", a.token, "orders", 2, connect.CodeInvalidArgument, "never removed"},
			{"zero", a.token, "orders", 0, connect.CodeInvalidArgument, "partition_count: must be at least 1"},
			{"negative", a.token, "orders", -3, connect.CodeInvalidArgument, "partition_count"},
			{"too many", a.token, "orders", 10001, connect.CodeInvalidArgument, "must be at most 10000"},
			{"bad name", a.token, "a/b", 9, connect.CodeInvalidArgument, `character '/'`},
			{"empty name", a.token, "", 9, connect.CodeInvalidArgument, "name: must not be empty"},
			{"internal name", a.token, "__consumer_offsets", 60, connect.CodeInvalidArgument, "reserved"},
			{"missing", a.token, "nope", 9, connect.CodeNotFound, `topic "nope" not found`},
			{"another tenant's", bob.token, "orders", 9, connect.CodeNotFound, `topic "orders" not found`},
			{"read-only key", c.scopedToken(t, a, tenants.ScopeConsume), "orders", 9, connect.CodePermissionDenied, `"admin" scope`},
			{"no token", "", "orders", 9, connect.CodeUnauthenticated, ""},
			{"over the plan", a.token, "orders", 31, connect.CodeResourceExhausted, "partitions limit reached: the tenant may have 30 (free plan and overrides); 8 in use"},
		} {
			_, err := grow(tt.token, tt.topic, tt.n)
			requireCode(t, tt.code, err, tt.msg)
			_ = tt.name
		}
		got, err := tc.DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		require.NoError(t, err)
		require.True(t, proto.Equal(desc.Msg, got.Msg), "refusals change nothing")

		// Exactly up to the plan's limit.
		res, err = grow(a.token, "orders", 30)
		require.NoError(t, err)
		require.Len(t, res.GetPartitions(), 30)

		// The controller moves a grown partition's leadership like any
		// other's when its leader dies.
		f.kill(idle)
		f.until(10*time.Second, "the expected state", func() error {
			for _, p := range c.partitions(t, topicID)[3:] {
				if p.Leader == idle || slices.Contains(p.ISR, idle) {
					return fmt.Errorf("partition %d: leader %d isr %v", p.Partition, p.Leader, p.ISR)
				}
			}
			return nil
		})
		p3 := c.partitions(t, topicID)[3]
		require.EqualValues(t, 1, p3.LeaderEpoch, "a new leader from the ISR with the next epoch")
		require.Contains(t, p3.Replicas, p3.Leader)

		// Too few live brokers for the topic's replication factor. (Over a
		// higher limit, so that the limit does not answer first.)
		op := c.operator(operatorToken)
		_, err = op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: a.tenantID, Plan: ptr("pro")}))
		require.NoError(t, err)
		other := idle%4 + 1
		f.kill(other)
		f.until(10*time.Second, "the expected state", func() error {
			bl, err := op.ListBrokers(ctx, connect.NewRequest(&sluicev1.ListBrokersRequest{}))
			if err != nil {
				return err
			}
			for _, b := range bl.Msg.GetBrokers() {
				if b.GetId() == other && b.GetLive() {
					return fmt.Errorf("broker %d still live", other)
				}
			}
			return nil
		})
		_, err = grow(a.token, "orders", 31)
		requireCode(t, connect.CodeFailedPrecondition, err, "replication factor 3 needs 3 live brokers; 2 live")
		got, err = tc.DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: "orders"}))
		require.NoError(t, err)
		require.EqualValues(t, 30, got.Msg.GetTopic().GetPartitionCount())
		require.Len(t, got.Msg.GetPartitions(), 30)
	})
}

// TestControlPlanePartitionGrowthUnderConcurrency: concurrent growths of a
// tenant's topics, two per topic, never pass the plan's partition limit;
// growths of one topic from the same count do not both apply.
func TestControlPlanePartitionGrowthUnderConcurrency(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		// The broker registered below never heartbeats: a lease that
		// outlives the test, however slow the machine (with the default
		// 10 s it lapsed under make test-busy, and placement found no live
		// broker).
		c := start(t, dbURL, func(cfg *controlplane.Config) { cfg.BrokerLease = 5 * time.Minute })
		c.registerBrokers(t, 1)
		a := c.signup(t, "racer")
		ctx := t.Context()
		const topics = 10 // the free plan's topic limit; 30 partitions
		for i := range topics {
			_, err := c.topics(a.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{
				Name: fmt.Sprintf("t%02d", i), PartitionCount: 1, ReplicationFactor: 1,
			}))
			require.NoError(t, err)
		}
		var (
			mu    sync.Mutex
			codes = map[connect.Code]int{}
			wg    sync.WaitGroup
		)
		start := make(chan struct{})
		for i := range 2 * topics {
			wg.Go(func() {
				<-start
				_, err := c.topics(a.token).CreatePartitions(ctx, connect.NewRequest(&sluicev1.CreatePartitionsRequest{
					Name: fmt.Sprintf("t%02d", i%topics), PartitionCount: 4,
				}))
				mu.Lock()
				defer mu.Unlock()
				code := connect.CodeOf(err)
				if err == nil {
					code = 0
				}
				codes[code]++
				switch code {
				case 0, connect.CodeResourceExhausted:
				case connect.CodeInvalidArgument:
					assert.Contains(t, err.Error(), "has 4 partitions", "the other growth of the topic went first")
				default:
					assert.NoError(t, err)
				}
			})
		}
		close(start)
		wg.Wait()
		// 10 + 3 per growth: six fit in 30, a seventh would make 31.
		require.Equal(t, 6, codes[0], "growths that succeeded: %v", codes)
		require.Positive(t, codes[connect.CodeResourceExhausted], "%v", codes)
		me, err := c.tenants(a.token).GetTenant(ctx, connect.NewRequest(&sluicev1.GetTenantRequest{}))
		require.NoError(t, err)
		require.EqualValues(t, 28, me.Msg.GetUsage().GetPartitions())
		list, err := c.topics(a.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
		require.NoError(t, err)
		sum := 0
		for _, tp := range list.Msg.GetTopics() {
			require.Contains(t, []int32{1, 4}, tp.GetPartitionCount())
			require.Len(t, c.partitions(t, tp.GetId()), int(tp.GetPartitionCount()))
			sum += int(tp.GetPartitionCount())
		}
		require.Equal(t, 28, sum)
	})
}
