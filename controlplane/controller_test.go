package controlplane_test

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
)

// fastController makes broker deaths visible within about a second (of a
// fake clock's time: startFake).
func fastController(cfg *controlplane.Config) {
	cfg.BrokerLease = time.Second
	cfg.Controller.LeaseTTL = time.Second
	cfg.Controller.PreferredLeaderDelay = time.Second
}

// fleet plays n brokers (ids 1..n) against a control plane on a fake
// clock (startFake, startAt): it registers them and heartbeats the live
// ones before each step the test moves the clock (tick), so that a
// broker's lease lapses only when the test stops heartbeating it and lets
// the time pass, never because a loaded machine delayed a heartbeat. A
// test that never moves the clock keeps every broker live without any
// heartbeat.
type fleet struct {
	t      *testing.T
	client sluicev1connect.BrokerServiceClient
	clock  *clock.Fake

	mu     sync.Mutex
	epochs map[int32]int64
	alive  map[int32]bool
}

func newFleet(t *testing.T, c *cluster, n int) *fleet {
	t.Helper()
	require.NotNil(t, c.clock, "a fleet plays against a control plane on a fake clock (startFake, startAt)")
	f := &fleet{t: t, client: c.brokers(brokerToken), clock: c.clock, epochs: map[int32]int64{}, alive: map[int32]bool{}}
	for id := int32(1); id <= int32(n); id++ {
		f.revive(id)
	}
	return f
}

// beat heartbeats the live brokers once.
func (f *fleet) beat(ctx context.Context) {
	f.mu.Lock()
	beats := map[int32]int64{}
	for id, ok := range f.alive {
		if ok {
			beats[id] = f.epochs[id]
		}
	}
	f.mu.Unlock()
	for id, epoch := range beats {
		_, err := f.client.HeartbeatBroker(ctx, connect.NewRequest(&sluicev1.HeartbeatBrokerRequest{BrokerId: id, BrokerEpoch: epoch}))
		require.NoError(f.t, err, "heartbeat of broker %d", id)
	}
}

// fakeStep is how far tick moves a fake clock: the controller's interval,
// a quarter of the broker lease (fastController).
const fakeStep = 250 * time.Millisecond

// startFake starts a control plane on a fake clock (fastController).
func startFake(t *testing.T, clk *clock.Fake, dbURL string, wrap func(store.Store) store.Store) *cluster {
	t.Helper()
	return startAt(t, dbURL, clk, wrap, fastController)
}

// tick heartbeats the live brokers and moves the fake clock a step: the
// controller runs a round at the new time, and the round the previous
// tick started has finished.
func (f *fleet) tick() {
	f.beat(context.Background())
	f.clock.Advance(fakeStep)
}

// until ticks until cond holds, for at most within of fake time, then
// once more, so that the round that made it hold has finished (its
// metrics are set).
func (f *fleet) until(within time.Duration, what string, cond func() error) {
	f.t.Helper()
	var err error
	for range int(within / fakeStep) {
		f.tick()
		if err = cond(); err == nil {
			f.tick()
			return
		}
	}
	f.t.Fatalf("%s: not within %s of fake time: %v", what, within, err)
}

// steady ticks for d of fake time and checks cond after each step.
func (f *fleet) steady(d time.Duration, what string, cond func() error) {
	f.t.Helper()
	for range int(d / fakeStep) {
		f.tick()
		if err := cond(); err != nil {
			f.t.Fatalf("%s: %v", what, err)
		}
	}
}

// revive registers broker id (again: a restart, with a new epoch) and
// heartbeats it from now on.
func (f *fleet) revive(id int32) int64 {
	f.t.Helper()
	res, err := f.client.RegisterBroker(context.Background(), connect.NewRequest(&sluicev1.RegisterBrokerRequest{
		BrokerId: id, Address: fmt.Sprintf("127.0.0.1:%d", 9100+id), Rack: string(rune('a' + id%3)),
	}))
	require.NoError(f.t, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epochs[id], f.alive[id] = res.Msg.GetBrokerEpoch(), true
	return res.Msg.GetBrokerEpoch()
}

// kill stops heartbeating broker id: its lease expires within the broker lease.
func (f *fleet) kill(ids ...int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.alive[id] = false
	}
}

func (f *fleet) epoch(id int32) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epochs[id]
}

// partitions reads the topic's partition state from the server's store.
func (c *cluster) partitions(t *testing.T, topicID string) []store.Partition {
	t.Helper()
	ps, err := c.srv.Store().ListPartitions(context.Background(), topicID)
	require.NoError(t, err)
	return ps
}

// live reports whether broker id's lease is live at the server's time
// (its fake clock's, or the wall clock's).
func (c *cluster) live(t *testing.T, id int32) bool {
	t.Helper()
	now := time.Now()
	if c.clock != nil {
		now = c.clock.Now()
	}
	brokers, err := c.srv.Store().ListBrokers(context.Background())
	require.NoError(t, err)
	i := slices.IndexFunc(brokers, func(b store.Broker) bool { return b.ID == id })
	return i >= 0 && brokers[i].Live(now)
}

// gone is a condition for until: broker id's lease lapsed, and the
// controller moved every leadership it had and took it out of every ISR
// it shared (an ISR of it alone stays: the last member is kept for a
// clean election when it returns).
func (c *cluster) gone(t *testing.T, id int32) func() error {
	return func() error {
		t.Helper()
		if c.live(t, id) {
			return fmt.Errorf("broker %d still live", id)
		}
		ps, err := c.srv.Store().ListAllPartitions(context.Background())
		require.NoError(t, err)
		for _, p := range ps {
			if p.Leader == id || len(p.ISR) > 1 && slices.Contains(p.ISR, id) {
				return fmt.Errorf("%s/%d still has broker %d: leader %d, ISR %v", p.TopicName, p.Partition.Partition, id, p.Leader, p.ISR)
			}
		}
		return nil
	}
}

// metric returns the value of the sample named exactly by series (name and
// labels as exposed) from the operator listener's /metrics.
func (c *cluster) metric(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := c.sample(t, series)
	require.True(t, ok, "no sample %s in /metrics", series)
	return v
}

// sample is metric's value, and false when /metrics has no such sample.
func (c *cluster) sample(t *testing.T, series string) (float64, bool) {
	t.Helper()
	res, err := c.hc.Get(c.metrics + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v, true
}

// createTopic creates a topic as a new tenant and returns its id.
func (c *cluster) createTopic(t *testing.T, tenant, name string, partitions, rf int32) string {
	t.Helper()
	a := c.signup(t, tenant)
	res, err := c.topics(a.token).CreateTopic(context.Background(), connect.NewRequest(&sluicev1.CreateTopicRequest{
		Name: name, PartitionCount: partitions, ReplicationFactor: rf,
	}))
	require.NoError(t, err)
	return res.Msg.GetTopic().GetId()
}

// TestControllerFailoverOfflineAndRecovery: a dead leader is replaced from
// the ISR with bumped epochs and the dead broker leaves every ISR; with every
// ISR member dead the partitions go offline and stay offline while only a
// non-ISR replica is back (no unclean election); when ISR members return
// they are elected.
func TestControllerFailoverOfflineAndRecovery(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		f := newFleet(t, c, 3)
		topicID := c.createTopic(t, "ctl", "orders", 3, 3)
		before := c.partitions(t, topicID)
		ledBy1 := slices.IndexFunc(before, func(p store.Partition) bool { return p.Leader == 1 })
		require.GreaterOrEqual(t, ledBy1, 0)
		for _, p := range before {
			require.Equal(t, p.Replicas[0], p.Leader)
			require.Zero(t, p.LeaderEpoch)
			require.Zero(t, p.PartitionEpoch)
			require.ElementsMatch(t, []int32{1, 2, 3}, p.ISR)
		}

		// Broker 1 dies.
		f.kill(1)
		f.until(10*time.Second, "the expected state", func() error {
			for _, p := range c.partitions(t, topicID) {
				if p.Leader == 1 || slices.Contains(p.ISR, 1) {
					return fmt.Errorf("partition %d still has broker 1: %+v", p.Partition, p)
				}
			}
			return nil
		})
		after := c.partitions(t, topicID)
		for i, p := range after {
			b := before[i]
			require.Equal(t, b.Replicas, p.Replicas)
			require.Equal(t, slices.DeleteFunc(slices.Clone(b.ISR), func(id int32) bool { return id == 1 }), p.ISR)
			require.EqualValues(t, 1, p.PartitionEpoch, "partition %d: one change", i)
			if i == ledBy1 {
				require.Equal(t, b.Replicas[1], p.Leader, "the next replica in the ISR takes over")
				require.EqualValues(t, 1, p.LeaderEpoch)
			} else {
				require.Equal(t, b.Leader, p.Leader, "a live leader keeps leading")
				require.Zero(t, p.LeaderEpoch)
			}
		}
		require.EqualValues(t, 1, c.metric(t, `sluice_controlplane_leader_elections_total{reason="leader_failover"}`))
		require.EqualValues(t, 3, c.metric(t, `sluice_controlplane_under_replicated_partitions`))
		require.EqualValues(t, 0, c.metric(t, `sluice_controlplane_offline_partitions`))
		require.EqualValues(t, 1, c.metric(t, `sluice_controlplane_controller_active`))

		// The rest of the ISR dies: every partition goes offline, ISR kept.
		f.kill(2, 3)
		f.until(10*time.Second, "the expected state", func() error {
			for _, p := range c.partitions(t, topicID) {
				if p.Leader != -1 {
					return fmt.Errorf("partition %d not offline: %+v", p.Partition, p)
				}
			}
			return nil
		})
		offline := c.partitions(t, topicID)
		for i, p := range offline {
			require.NotEmpty(t, p.ISR, "partition %d", i)
			require.NotContains(t, p.ISR, int32(1), "partition %d", i)
			require.Greater(t, p.LeaderEpoch, after[i].LeaderEpoch)
		}
		f.until(5*time.Second, "the expected state", func() error {
			if v := c.metric(t, `sluice_controlplane_offline_partitions`); v != 3 {
				return fmt.Errorf("offline_partitions = %v", v)
			}
			return nil
		})

		// Broker 1 comes back, but it is not in any ISR: nothing is elected.
		f.revive(1)
		f.steady(time.Second, "a state that must hold", func() error {
			if got := c.partitions(t, topicID); !slices.EqualFunc(got, offline, func(a, b store.Partition) bool {
				return a.Leader == b.Leader && a.LeaderEpoch == b.LeaderEpoch && a.PartitionEpoch == b.PartitionEpoch
			}) {
				return fmt.Errorf("an offline partition changed with only broker 1 live: %+v", got)
			}
			return nil
		})

		// The ISR members come back: elected from the last ISR, one epoch up.
		f.revive(2)
		f.revive(3)
		f.until(10*time.Second, "the expected state", func() error {
			for _, p := range c.partitions(t, topicID) {
				if p.Leader == -1 {
					return fmt.Errorf("partition %d still offline", p.Partition)
				}
			}
			return nil
		})
		// Brokers 2 and 3 stopped heartbeating together, but their leases
		// may have expired in different controller rounds: a partition went
		// offline with both in its ISR, or first shrank to the one that
		// expired last. Broker 2 registers again first; a re-registering
		// broker leaves every ISR that has other members (its disk may be
		// empty) and stays as the sole member.
		for i, p := range c.partitions(t, topicID) {
			last := offline[i].ISR
			require.Contains(t, last, p.Leader, "partition %d: leader from the last ISR", i)
			require.Equal(t, offline[i].LeaderEpoch+1, p.LeaderEpoch, "partition %d: exactly one election since offline", i)
			switch {
			case len(last) == 1:
				require.Equal(t, last[0], p.Leader, "partition %d: the sole ISR member is elected when it is back", i)
				require.Equal(t, offline[i].PartitionEpoch+1, p.PartitionEpoch, "partition %d: one election", i)
			default:
				require.ElementsMatch(t, []int32{2, 3}, last, "partition %d", i)
				require.Equal(t, int32(3), p.Leader, "partition %d: broker 2 re-registered first and left the ISR; 3 was the last ISR member", i)
				require.Equal(t, offline[i].PartitionEpoch+2, p.PartitionEpoch, "partition %d: broker 2 fenced out of the ISR, then one election", i)
			}
		}
		f.until(5*time.Second, "the expected state", func() error {
			if v := c.metric(t, `sluice_controlplane_offline_partitions`); v != 0 {
				return fmt.Errorf("offline_partitions = %v", v)
			}
			return nil
		})
		require.EqualValues(t, 3, c.metric(t, `sluice_controlplane_leader_elections_total{reason="offline_recovery"}`))
	})
}

// TestControllerPreferredLeaderRestore: after the preferred leader returns
// and its leader adds it back to the ISR, leadership moves back to it once
// it has been live for the preferred-leader delay.
func TestControllerPreferredLeaderRestore(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		f := newFleet(t, c, 3)
		topicID := c.createTopic(t, "pref", "orders", 1, 3)
		p0 := c.partitions(t, topicID)[0]
		pref := p0.Replicas[0]
		f.kill(pref)
		var moved store.Partition
		f.until(10*time.Second, "the expected state", func() error {
			moved = c.partitions(t, topicID)[0]
			if moved.Leader == pref || moved.Leader < 0 || slices.Contains(moved.ISR, pref) { // offline (-1) is not failed over yet
				return fmt.Errorf("not failed over yet: %+v", moved)
			}
			return nil
		})
		f.revive(pref)
		// The new leader takes the returning broker back into the ISR.
		res, err := c.brokers(brokerToken).AlterPartition(context.Background(), connect.NewRequest(&sluicev1.AlterPartitionRequest{
			BrokerId: moved.Leader, BrokerEpoch: f.epoch(moved.Leader), TopicId: topicID, Partition: 0,
			LeaderEpoch: moved.LeaderEpoch, PartitionEpoch: moved.PartitionEpoch, NewIsr: append(slices.Clone(moved.ISR), pref),
			AddedBrokerEpochs: []*sluicev1.BrokerEpoch{{BrokerId: pref, BrokerEpoch: f.epoch(pref)}},
		}))
		require.NoError(t, err)
		require.Contains(t, res.Msg.GetPartition().GetIsr(), pref)
		f.until(10*time.Second, "the expected state", func() error {
			if p := c.partitions(t, topicID)[0]; p.Leader != pref {
				return fmt.Errorf("leadership not restored: %+v", p)
			}
			return nil
		})
		back := c.partitions(t, topicID)[0]
		require.Equal(t, moved.LeaderEpoch+1, back.LeaderEpoch)
		require.Equal(t, res.Msg.GetPartition().GetPartitionEpoch()+1, back.PartitionEpoch)
		require.EqualValues(t, 1, c.metric(t, `sluice_controlplane_leader_elections_total{reason="preferred_leader"}`))
	})
}

// TestControllerSingleActiveAndFailover: two control-plane replicas on one
// Postgres; exactly one is the controller at a time; when it stops the other
// takes over with a higher controller epoch, and the old epoch can no longer
// write.
func TestControllerSingleActiveAndFailover(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	clk := clock.NewFake(time.Now()) // both replicas' time
	a := startFake(t, clk, url, nil)
	b := startFake(t, clk, url, nil)
	nodes := []*cluster{a, b}
	steps := newFleet(t, a, 0) // no brokers yet: moves the clock
	actives := func() (active []int) {
		for i, n := range nodes {
			if n.metric(t, `sluice_controlplane_controller_active`) == 1 {
				active = append(active, i)
			}
		}
		return active
	}
	steps.until(10*time.Second, "the expected state", func() error {
		if got := actives(); len(got) != 1 {
			return fmt.Errorf("active controllers: %v", got)
		}
		return nil
	})
	steps.steady(time.Second, "a state that must hold", func() error {
		if got := actives(); len(got) > 1 {
			return fmt.Errorf("two active controllers: %v", got)
		}
		return nil
	})
	first := actives()[0]
	standby := nodes[1-first]
	oldEpoch := nodes[first].metric(t, `sluice_controlplane_controller_epoch`)
	require.Positive(t, oldEpoch)

	f := newFleet(t, standby, 3)
	topicID := standby.createTopic(t, "hatenant", "orders", 1, 3)
	nodes[first].stop()
	f.until(10*time.Second, "the expected state", func() error {
		if v := standby.metric(t, `sluice_controlplane_controller_active`); v != 1 {
			return fmt.Errorf("standby not active yet")
		}
		return nil
	})
	newEpoch := standby.metric(t, `sluice_controlplane_controller_epoch`)
	require.Greater(t, newEpoch, oldEpoch)

	// The deposed epoch cannot write; the new controller does its job.
	p := standby.partitions(t, topicID)[0]
	next := p
	next.Leader, next.LeaderEpoch, next.PartitionEpoch = p.Replicas[1], p.LeaderEpoch+1, p.PartitionEpoch+1
	err := standby.srv.Store().UpdatePartitionFenced(context.Background(), next, p.PartitionEpoch, int64(oldEpoch))
	require.ErrorIs(t, err, store.ErrFenced)
	f.kill(p.Leader)
	f.until(10*time.Second, "the expected state", func() error {
		if q := standby.partitions(t, topicID)[0]; q.Leader == p.Leader {
			return fmt.Errorf("no failover by the new controller: %+v", q)
		}
		return nil
	})
}

// TestControllerRestartedBrokerLeavesISR: a broker that registers again
// while its lease is still live (a fast restart, maybe with an empty disk)
// leaves every ISR and its leaderships at once; its old incarnation failed.
func TestControllerRestartedBrokerLeavesISR(t *testing.T) {
	t.Parallel()
	c := startFake(t, clock.NewFake(time.Now()), "sqlite:"+t.TempDir()+"/cp.db", nil)
	f := newFleet(t, c, 3)
	topicID := c.createTopic(t, "restart", "orders", 3, 3)
	// Let the controller see every broker live under its first epoch.
	f.until(10*time.Second, "the expected state", func() error {
		if c.metric(t, `sluice_controlplane_controller_active`) != 1 {
			return fmt.Errorf("controller not active yet")
		}
		return nil
	})
	f.revive(1)
	// Fenced before RegisterBroker returned the new epoch: the new
	// incarnation never sees an assignment made to the old one.
	for _, p := range c.partitions(t, topicID) {
		require.NotEqual(t, int32(1), p.Leader, "partition %d", p.Partition)
		require.NotContains(t, p.ISR, int32(1), "partition %d", p.Partition)
	}
	for _, p := range c.partitions(t, topicID) {
		require.Len(t, p.ISR, 2)
		require.NotEqual(t, int32(-1), p.Leader, "the other ISR members lead")
	}
}

// partitionWrites counts the plain partition writes (AlterPartition's and
// a registration's, not the controller's fenced ones) by transaction.
type partitionWrites struct {
	store.Store
	single, batches atomic.Int32
	mu              sync.Mutex
	sizes           []int // of the batches, in order
}

func (s *partitionWrites) UpdatePartition(ctx context.Context, p store.Partition, expectedEpoch int32) error {
	s.single.Add(1)
	return s.Store.UpdatePartition(ctx, p, expectedEpoch)
}

func (s *partitionWrites) UpdatePartitions(ctx context.Context, updates []store.PartitionUpdate) ([]error, error) {
	s.batches.Add(1)
	s.mu.Lock()
	s.sizes = append(s.sizes, len(updates))
	s.mu.Unlock()
	return s.Store.UpdatePartitions(ctx, updates)
}

// TestControllerRestartedBrokerFencedInBatches: a broker that registers
// again while a replica of 1,200 partitions leaves them all before it gets
// its new epoch, in transactions of 500, not one per partition.
func TestControllerRestartedBrokerFencedInBatches(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		w := &partitionWrites{}
		c := startFake(t, clock.NewFake(time.Now()), dbURL, func(s store.Store) store.Store { w.Store = s; return w })
		f := newFleet(t, c, 3)
		a := c.signup(t, "fence")
		const n = 1200
		now := time.Now().UTC()
		tp := store.Topic{ID: store.NewID(), TenantID: a.tenantID, Name: "many", Partitions: n, ReplicationFactor: 3,
			Config:    store.TopicConfig{RetentionMs: -1, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2, MaxMessageBytes: 1 << 20, MinInsyncReplicas: 2, CleanupPolicy: "delete"},
			CreatedAt: now, UpdatedAt: now}
		parts := make([]store.Partition, n)
		for i := range int32(n) {
			r := []int32{i%3 + 1, (i+1)%3 + 1, (i+2)%3 + 1}
			parts[i] = store.Partition{TopicID: tp.ID, Partition: i, Replicas: r, Leader: r[0], ISR: r}
		}
		require.NoError(t, c.srv.Store().CreateTopic(t.Context(), tp, parts, store.CountLimits{}))

		f.revive(1)
		for _, p := range c.partitions(t, tp.ID) {
			require.NotEqual(t, int32(1), p.Leader, "partition %d", p.Partition)
			// The others stay unless the controller saw one's lease lapse
			// meanwhile (a loaded machine delays the fleet's heartbeats).
			require.NotEmpty(t, p.ISR, "partition %d", p.Partition)
			require.Subset(t, []int32{2, 3}, p.ISR, "partition %d", p.Partition)
		}
		require.Zero(t, w.single.Load(), "no write of one partition")
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, size := range w.sizes {
			require.LessOrEqual(t, size, 500, "a transaction holds at most 500 partitions: %v", w.sizes)
		}
		// Three when nothing else changed the partitions meanwhile; a
		// second round, re-read, when the controller changed some of them
		// concurrently (it saw a lease lapse on a loaded machine) and the
		// first round's writes conflicted.
		require.NotEmpty(t, w.sizes)
		require.LessOrEqual(t, len(w.sizes), 2*(n+499)/500, "a transaction per 500 partitions: %v", w.sizes)
		t.Logf("partition writes in transactions of %v", w.sizes)
	})
}
