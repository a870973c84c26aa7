package broker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// lagCluster is an in-process control plane (SQLite) and three brokers, as
// `sluice dev` runs them, with one signed-up tenant.
type lagCluster struct {
	brokers  []*Broker
	tenantID string
	token    string                              // the tenant's
	records  sluicev1connect.RecordServiceClient // through broker 1, which forwards
	groups   sluicev1connect.GroupServiceClient
	topics   sluicev1connect.TopicServiceClient // on the control plane
	cp       *controlplane.Server
	cluster  *localcluster.Cluster // for its faults
	endpoint string                // the control plane's API
	// cpMetrics and brokerMetrics (by broker index) are the operator
	// listeners' URLs.
	cpMetrics     string
	brokerMetrics []string
	// Per broker (by index): its config, and its Run's stop and end
	// (stopBroker, restartBroker).
	brokerCfgs []Config
	brokerStop []context.CancelFunc
	brokerDone []chan struct{}
	brokerDeps Deps
	brokerMu   sync.Mutex
	runCtx     context.Context // the cluster's, ended at cleanup
}

func startLagCluster(t *testing.T) *lagCluster {
	t.Helper()
	return startTestCluster(t, testClusterOpts{})
}

// testClusterOpts vary the in-process cluster.
type testClusterOpts struct {
	// tier, when set, is the brokers' tiered storage.
	tier objstore.Store
	// broker adjusts each broker's config.
	broker func(*Config)
	// topicConfig is the "orders" topic's config.
	topicConfig *sluicev1.TopicConfig
	// controlPlane adjusts the control plane's config.
	controlPlane func(*controlplane.Config)
}

// The in-process cluster's broker and operator credentials.
const testBrokerToken, testOperatorToken = "broker-secret-for-tests-0123456789", "operator-secret-for-tests-0123456789"

// startTestCluster starts the cluster through internal/localcluster (as
// sluice dev wires it), with brokers this package builds itself: it keeps
// each *Broker, for the tests that look inside.
func startTestCluster(t testing.TB, opts testClusterOpts) *lagCluster {
	t.Helper()
	const brokerToken, operatorToken = testBrokerToken, testOperatorToken
	ctx, cancel := context.WithCancel(context.Background())
	c := &lagCluster{brokerDeps: Deps{TierStore: opts.tier}, runCtx: ctx}
	newBroker := func(spec localcluster.BrokerSpec) (localcluster.Node, error) {
		bc := DefaultConfig()
		bc.ID = spec.ID
		bc.DataDir = spec.DataDir
		bc.ControlPlane = spec.ControlPlane
		bc.BrokerToken = spec.BrokerToken
		bc.GroupHeartbeatInterval, bc.GroupSessionTimeout = 300*time.Millisecond, 10*time.Second
		bc.GroupLagMetricsInterval = time.Hour // the test runs each computation itself
		if opts.broker != nil {
			opts.broker(&bc)
		}
		bc.ListenAddr, bc.AdvertisedAddr = spec.Addr, spec.Addr
		deps := c.brokerDeps
		deps.Interceptors = spec.Interceptors
		b, err := New(bc, deps)
		if err != nil {
			return nil, err
		}
		c.brokerMu.Lock()
		defer c.brokerMu.Unlock()
		if spec.Index < len(c.brokers) { // a restart
			c.brokers[spec.Index] = b
		} else {
			c.brokers, c.brokerCfgs = append(c.brokers, b), append(c.brokerCfgs, bc)
		}
		return b, nil
	}
	lc, err := localcluster.New(ctx, localcluster.Options{
		DataDir: t.TempDir(), MetricsAddr: "127.0.0.1:0", BrokerMetrics: true,
		BrokerToken: brokerToken, OperatorToken: operatorToken, ControlPlane: opts.controlPlane, NewBroker: newBroker,
	})
	require.NoError(t, err)
	c.cluster, c.cp, c.endpoint, c.cpMetrics = lc, lc.ControlPlane(), lc.Endpoint, "http://"+lc.MetricsAddr
	endpoint := c.endpoint
	if err := lc.StartBrokers(ctx); err != nil {
		_ = lc.Close()
		require.NoError(t, err)
	}
	closed := make(chan struct{})
	close(closed)
	for i, b := range lc.Brokers() {
		c.brokerMetrics = append(c.brokerMetrics, "http://"+b.MetricsAddr)
		// stopBroker and restartBroker (txn_test.go) run a broker again
		// outside the cluster, on runCtx.
		c.brokerStop = append(c.brokerStop, func() { _ = lc.StopBroker(i) })
		c.brokerDone = append(c.brokerDone, closed)
	}
	t.Cleanup(func() {
		cancel()
		c.brokerMu.Lock()
		for _, d := range c.brokerDone {
			<-d
		}
		c.brokerMu.Unlock()
		_ = lc.Close()
	})

	hc := h2c.Client()
	su, err := sluicev1connect.NewTenantServiceClient(hc, endpoint).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: "lag@example.com", TenantName: "lag"}))
	require.NoError(t, err)
	c.tenantID = su.Msg.GetTenant().GetId()
	// On the pro plan: the tests' traffic stays far below its quotas
	// (the free plan's 5 MiB/s of produce is less than some write).
	pro := tenants.PlanPro
	_, err = sluicev1connect.NewOperatorServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(operatorToken))).UpdateTenant(ctx,
		connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: c.tenantID, Plan: &pro}))
	require.NoError(t, err)
	tok, err := sluicev1connect.NewAuthServiceClient(hc, endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: su.Msg.GetApiKeySecret()}))
	require.NoError(t, err)
	c.token = tok.Msg.GetToken()
	bearer := connect.WithInterceptors(tenants.Bearer(c.token))
	base := "http://" + c.brokers[0].cfg.Advertised()
	c.records = sluicev1connect.NewRecordServiceClient(hc, base, bearer)
	c.groups = sluicev1connect.NewGroupServiceClient(hc, base, bearer)

	topics := sluicev1connect.NewTopicServiceClient(hc, endpoint, bearer)
	c.topics = topics
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		_, err := topics.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 2, ReplicationFactor: 3, Config: opts.topicConfig}))
		return err // the brokers may not be live yet
	})
	// Ready when every broker knows a leader for every partition of the
	// topic and of the offsets topic, and each leader's replica leads.
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		for _, b := range c.brokers {
			for _, tt := range [][2]string{{c.tenantID, "orders"}, {systemTenantID, offsetsTopic}} {
				tm, ok := b.metadata().Topic(tt[0], tt[1])
				if !ok {
					return fmt.Errorf("broker %d does not know topic %s", b.cfg.ID, tt[1])
				}
				for _, pm := range tm.Partitions {
					if pm.Leader < 0 || len(pm.ISR) < 3 {
						return fmt.Errorf("broker %d: topic %s partition %d has leader %d, ISR %v", b.cfg.ID, tt[1], pm.Partition, pm.Leader, pm.ISR)
					}
					// The view is published before the replicas apply it.
					if p := b.partition(tm.ID, pm.Partition); pm.Leader == b.cfg.ID && (p == nil || !p.LeadsAt(pm.LeaderEpoch)) {
						return fmt.Errorf("broker %d: topic %s partition %d: its replica does not lead yet", b.cfg.ID, tt[1], pm.Partition)
					}
				}
			}
		}
		return nil
	})
	return c
}

// listenLoopback binds a free loopback port.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

// produce writes one batch of n records stamped at ts to a partition.
func (c *lagCluster) produce(t *testing.T, partition int32, n int, ts time.Time) {
	t.Helper()
	recs := make([]*sluicev1.Record, n)
	for i := range recs {
		recs[i] = &sluicev1.Record{Value: []byte(fmt.Sprintf("r%d", i)), TimestampMs: ts.UnixMilli()}
	}
	_, err := c.records.Produce(context.Background(), connect.NewRequest(&sluicev1.ProduceRequest{
		Topic: "orders", Partition: partition, Acks: sluicev1.Acks_ACKS_ALL,
		Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: recs}},
	}))
	require.NoError(t, err)
}

// commit commits offsets for a group with no members, retrying while the
// coordinator takes over its offsets partition.
func (c *lagCluster) commit(t *testing.T, group string, offsets map[int32]int64) {
	t.Helper()
	req := &sluicev1.CommitOffsetsRequest{Group: group}
	for p, off := range offsets {
		req.Offsets = append(req.Offsets, &sluicev1.PartitionOffset{Topic: "orders", Partition: p, Offset: off})
	}
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		_, err := c.groups.CommitOffsets(context.Background(), connect.NewRequest(req))
		return err
	})
}

// coordinatorOf is the broker that leads the group's offsets partition.
func (c *lagCluster) coordinatorOf(t *testing.T, group string) int32 {
	t.Helper()
	ot, ok := c.brokers[0].metadata().Topic(systemTenantID, offsetsTopic)
	require.True(t, ok)
	return ot.Partitions[coordinator.PartitionOf(c.tenantID, group, len(ot.Partitions))].Leader
}

// computeLag runs one lag computation on every broker at now.
func (c *lagCluster) computeLag(now time.Time) {
	for _, b := range c.brokers {
		b.computeGroupLag(context.Background(), now)
	}
}

// fetchedBytes sums sluice_broker_fetched_bytes_total of the tenant over
// the brokers.
func (c *lagCluster) fetchedBytes(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for _, b := range c.brokers {
		mfs, err := b.Registry().Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "sluice_broker_fetched_bytes_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "tenant" && lp.GetValue() == c.tenantID {
						sum += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return sum
}

// lagMetrics gathers a broker's group lag gauges: the lag series of the
// cluster's tenant, by "metric group topic partition", and the two counts.
func lagMetrics(t *testing.T, b *Broker, tenantID string) (series map[string]float64, truncated, omitted float64) {
	t.Helper()
	mfs, err := b.Registry().Gather()
	require.NoError(t, err)
	series = map[string]float64{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "sluice_group_lag_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue()
			switch name {
			case "sluice_group_lag_metrics_truncated":
				truncated = v
				continue
			case "sluice_group_lag_metrics_omitted":
				omitted = v
				continue
			}
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			require.NotEqual(t, offsetsTopic, l["topic"], "the offsets topic is no group's")
			if l["tenant"] == tenantID {
				series[fmt.Sprintf("%s %s %s %s", strings.TrimPrefix(name, "sluice_group_lag_"), l["group"], l["topic"], l["partition"])] = v
			}
		}
	}
	return series, truncated, omitted
}

func TestBrokerGroupLagMetrics(t *testing.T) {
	t.Parallel()
	c := startLagCluster(t)
	start := time.Now().Truncate(time.Millisecond)
	twoHours, oneHour, halfHour := start.Add(-2*time.Hour), start.Add(-time.Hour), start.Add(-30*time.Minute)

	// Partition 0: offsets 0-2 from two hours ago, 3-6 from an hour ago.
	// Partition 1: offsets 0-1 from two hours ago.
	c.produce(t, 0, 3, twoHours)
	c.produce(t, 0, 4, oneHour)
	c.produce(t, 1, 2, twoHours)
	// billing has read up to offset 3 of partition 0 and all of partition 1.
	c.commit(t, "billing", map[int32]int64{0: 3, 1: 2})
	// More records: partition 0 offsets 7-8 now, partition 1 offsets 2-6
	// from half an hour ago. audit has read everything of partition 0.
	c.produce(t, 0, 2, start)
	c.produce(t, 1, 5, halfHour)
	c.commit(t, "audit", map[int32]int64{0: 9})

	fetchedBefore := c.fetchedBytes(t)
	now := time.Now()
	c.computeLag(now)
	require.Equal(t, fetchedBefore, c.fetchedBytes(t), "the brokers' own reads are not the tenant's fetched bytes")
	age := func(ts time.Time) float64 { return now.Sub(ts).Seconds() }
	want := map[string]map[string]float64{
		"billing": {
			// 9 - 3 records; the oldest unconsumed (offset 3) is an hour old.
			"messages billing orders 0": 6, "seconds billing orders 0": age(oneHour),
			// 7 - 2 records; offset 2 is half an hour old.
			"messages billing orders 1": 5, "seconds billing orders 1": age(halfHour),
		},
		"audit": {"messages audit orders 0": 0, "seconds audit orders 0": 0},
	}
	// Each group is exported by its coordinator, and by no other broker.
	got := map[int32]map[string]float64{}
	for _, b := range c.brokers {
		series, truncated, omitted := lagMetrics(t, b, c.tenantID)
		got[b.cfg.ID] = series
		require.Zero(t, truncated, "broker %d", b.cfg.ID)
		require.Zero(t, omitted, "broker %d", b.cfg.ID)
	}
	for group, series := range want {
		coord := c.coordinatorOf(t, group)
		for k, v := range series {
			require.Contains(t, got[coord], k, "coordinator %d exports %s", coord, k)
			require.InDelta(t, v, got[coord][k], 0.001, k)
		}
		for id, s := range got {
			for k := range s {
				if strings.Split(k, " ")[1] == group {
					require.Equal(t, coord, id, "%s exported by broker %d, not the coordinator %d", k, id, coord)
				}
			}
		}
	}
	total := 0
	for _, s := range got {
		total += len(s)
	}
	require.Equal(t, 6, total, "one messages and one seconds series per committed partition: %v", got)

	// ListGroupLags (for the control plane's alerts) answers the same, with
	// the offsets, from each coordinator; only to the broker credential.
	lags := map[string]*sluicev1.GroupPartitionLag{}
	for _, b := range c.brokers {
		rc := sluicev1connect.NewReplicaServiceClient(h2c.Client(), "http://"+b.cfg.Advertised(), connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(b.cfg.BrokerToken)))
		res, err := rc.ListGroupLags(context.Background(), connect.NewRequest(&sluicev1.ListGroupLagsRequest{}))
		require.NoError(t, err)
		require.WithinDuration(t, now, res.Msg.GetComputeTime().AsTime(), time.Millisecond)
		for _, l := range res.Msg.GetLags() {
			require.Equal(t, c.coordinatorOf(t, l.GetGroup()), b.cfg.ID)
			lags[fmt.Sprintf("%s %s %d", l.GetGroup(), l.GetTopic(), l.GetPartition())] = l
		}
		anon := sluicev1connect.NewReplicaServiceClient(h2c.Client(), "http://"+b.cfg.Advertised(), connect.WithGRPC())
		_, err = anon.ListGroupLags(context.Background(), connect.NewRequest(&sluicev1.ListGroupLagsRequest{}))
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
	}
	require.Len(t, lags, 3)
	b0 := lags["billing orders 0"]
	require.Equal(t, c.tenantID, b0.GetTenantId())
	require.NotEmpty(t, b0.GetTopicId())
	require.EqualValues(t, 3, b0.GetCommittedOffset())
	require.EqualValues(t, 9, b0.GetHighWatermark())
	require.EqualValues(t, 0, b0.GetLogStartOffset())
	require.EqualValues(t, 6, b0.GetLagMessages())
	require.Positive(t, b0.GetPartitionBytes(), "the partition's size, for retention.bytes forecasts")
	require.InDelta(t, age(oneHour)*1000, float64(b0.GetLagAgeMs()), 1)
	require.EqualValues(t, 0, lags["audit orders 0"].GetLagAgeMs())

	// A deleted group's series are gone after the next computation.
	testenv.Wait(t, 10*time.Second, "the expected state", func() error {
		_, err := c.groups.DeleteGroup(context.Background(), connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: "audit"}))
		return err
	})
	c.computeLag(time.Now())
	for _, b := range c.brokers {
		series, _, _ := lagMetrics(t, b, c.tenantID)
		for k := range series {
			require.NotContains(t, k, " audit ", "broker %d still exports the deleted group", b.cfg.ID)
		}
	}

	// Over the cap, the group is exported per topic: records summed, the
	// oldest record's age.
	coord := c.brokers[c.coordinatorOf(t, "billing")-1]
	coord.cfg.GroupLagMetricsMaxSeries = 1 // only this test goroutine reads it (the loop waits an hour)
	now = time.Now()
	coord.computeGroupLag(context.Background(), now)
	series, truncated, omitted := lagMetrics(t, coord, c.tenantID)
	require.Len(t, series, 2, "%v", series)
	require.InDelta(t, 11, series["messages billing orders all"], 0)
	require.InDelta(t, now.Sub(oneHour).Seconds(), series["seconds billing orders all"], 0.001)
	require.InDelta(t, 1, truncated, 0)
	require.Zero(t, omitted)
}

// TestBrokerGroupLagLoopSlowerThanInterval: a lag round that takes longer
// than --group-lag-metrics-interval (here the leader's ListOffsets answers
// 3× the interval late, even past the caller's deadline, as a starved
// process does on a loaded machine) still publishes: the round
// is given groups.MinLagRound, not only the interval. With the interval as
// its whole budget, every round ran out and kept the previous (empty)
// values: the lag alerts saw no sample (TestLagAlerts* under load).
func TestBrokerGroupLagLoopSlowerThanInterval(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond // the least the config allows
	c := startTestCluster(t, testClusterOpts{broker: func(bc *Config) { bc.GroupLagMetricsInterval = interval }})
	// A group whose coordinator asks another broker for the offsets, so that
	// the call goes through the leader's client port and its fault.
	_, pm, err := c.brokers[0].metadata().Resolve(c.tenantID, "orders", 0)
	require.NoError(t, err)
	leader := pm.Leader
	var group string
	for i := 0; group == ""; i++ {
		if g := fmt.Sprintf("slow-%d", i); c.coordinatorOf(t, g) != leader {
			group = g
		}
	}
	c.cluster.AddFault(localcluster.Fault{Broker: leader, Procedure: "ListOffsets", Topic: "orders", Partition: 0,
		Hook: func(context.Context, localcluster.Call) error {
			time.Sleep(3 * interval) // fault: a starved leader answers late, whatever the caller's deadline
			return nil
		}})
	c.produce(t, 0, 4, time.Now())
	c.commit(t, group, map[int32]int64{0: 1})

	coord := c.brokers[c.coordinatorOf(t, group)-1]
	testenv.Wait(t, 30*time.Second, "the coordinator's lag report to have the group", func() error {
		r, err := coord.groups.LagReport()
		if err != nil {
			return err
		}
		for _, l := range r.Lags {
			if l.Group == group && l.Topic == "orders" && l.Partition == 0 {
				if l.LagMessages != 3 {
					return testenv.Permanent(fmt.Errorf("lag %d, want 3", l.LagMessages))
				}
				return nil
			}
		}
		return fmt.Errorf("not in the report computed at %s: %+v", r.ComputeTime, r.Lags)
	})
}
