package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// serveBroker serves b's client port (its services, with their auth) on
// loopback over h2c, as Run would, and makes it b's run context's broker.
func serveBroker(t *testing.T, b *Broker, ctx context.Context) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(b.handler)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()
	return srv.Listener.Addr().String()
}

// TestBrokerFollowerFetchesThroughOneSession: broker 2 follows 40
// partitions led by broker 1 through the brokers' own ReplicaService (the
// Connect handler and its broker-token rule): one fetcher on broker 2, one
// session on broker 1 carrying all 40, FetchReplicas only, and the
// records and HW replicated.
func TestBrokerFollowerFetchesThroughOneSession(t *testing.T) {
	t.Parallel()
	const n = 40
	b1, b2 := newTestBroker(t), newTestBroker(t)
	b2.cfg.ID = 2
	b2.host.ID = 2
	ctx, cancel := context.WithCancel(context.Background())
	addr1, addr2 := serveBroker(t, b1, ctx), serveBroker(t, b2, ctx)
	t.Cleanup(func() {
		cancel()
		b2.replicas.Close()
		b1.replicas.Close()
	})
	m := &sluicev1.WatchAssignmentsResponse{MetadataVersion: 1, Brokers: []*sluicev1.BrokerEndpoint{
		{BrokerId: 1, Address: addr1}, {BrokerId: 2, Address: addr2},
	}}
	for p := range int32(n) {
		m.Partitions = append(m.Partitions, &sluicev1.PartitionAssignment{
			TenantId: growTenant, TopicId: growTopic, TopicName: "orders", Partition: p,
			Replicas: []int32{1, 2}, Leader: 1, Isr: []int32{1, 2},
			Config: &sluicev1.TopicConfig{MinInsyncReplicas: ptrTo(int32(2)), MaxMessageBytes: ptrTo(int32(1 << 20))},
		})
	}
	b1.applyMetadata(toClusterMeta(m))
	b2.applyMetadata(toClusterMeta(m))

	batch, err := log.EncodeLeaderBatch(nil, record.BatchHeader{ProducerID: -1}, []record.Record{{Value: []byte("v")}})
	require.NoError(t, err)
	for p := range int32(n) {
		l := b1.partition(growTopic, p)
		testenv.Wait(t, 10*time.Second, "leading", func() error {
			if r := l.Status().Role; r != partition.RoleLeader {
				return fmt.Errorf("role %v", r)
			}
			return nil
		})
		_, err := l.Produce(ctx, []log.ValidBatch{batch}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
		require.NoError(t, err, "acks=all needs broker 2's copy")
	}
	testenv.Wait(t, 10*time.Second, "broker 2 has every record and the HW", func() error {
		for p := range int32(n) {
			if f := b2.partition(growTopic, p); f.Log().LEO() != 1 || f.HighWatermark() != 1 {
				return fmt.Errorf("partition %d: LEO %d HW %d", p, f.Log().LEO(), f.HighWatermark())
			}
		}
		return nil
	})
	require.Equal(t, 1, b2.host.Fetchers())
	require.Equal(t, fetchsession.Stats{Sessions: 1, Partitions: n}, b1.sessions.Stats())
	require.Zero(t, testutil.ToFloat64(b1.metrics.fetchSessionRequests.WithLabelValues("refused")))
	require.Positive(t, testutil.ToFloat64(b1.metrics.fetchSessionRequests.WithLabelValues("incremental")))
	served := func(procedure string) float64 {
		mfs, err := b1.registry.Gather()
		require.NoError(t, err)
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() != "sluice_broker_rpc_requests_total" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, lp := range mt.GetLabel() {
					if lp.GetName() == "procedure" && lp.GetValue() == procedure {
						sum += mt.GetCounter().GetValue()
					}
				}
			}
		}
		return sum
	}
	require.Zero(t, served(sluicev1connect.ReplicaServiceFetchReplicaProcedure))
	require.Positive(t, served(sluicev1connect.ReplicaServiceFetchReplicasProcedure))
}
