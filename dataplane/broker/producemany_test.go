package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/records"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// plainBatch is one batch of n records without a producer id.
func plainBatch(t *testing.T, n int) []byte {
	t.Helper()
	b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, benchRecords(n, 100))
	require.NoError(t, err)
	return b
}

// TestBrokerProduceManyEntriesAnsweredAsProduce: one ProduceMany request
// mixing entries that succeed and entries that fail answers each as a
// Produce of it alone (sent with the no-forward header, as routing clients
// send it) answers: the same code, message and details (another tenant's
// topic NotFound, a partition another broker leads NotLeader with its
// address, a sequence gap ProducerError, a corrupt batch InvalidArgument, a
// partition beyond the count NotFound), while the good entries are
// written; with acks=all every replica of every written partition holds
// its entry when the answer comes.
func TestBrokerProduceManyEntriesAnsweredAsProduce(t *testing.T) {
	c := startLagCluster(t)
	ctx := context.Background()
	hc := h2c.Client()

	// Another tenant's topic, which tenant 1 must not see.
	su, err := sluicev1connect.NewTenantServiceClient(hc, c.endpoint).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: "other@example.com", TenantName: "other"}))
	require.NoError(t, err)
	tok, err := sluicev1connect.NewAuthServiceClient(hc, c.endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: su.Msg.GetApiKeySecret()}))
	require.NoError(t, err)
	_, err = sluicev1connect.NewTopicServiceClient(hc, c.endpoint, connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))).CreateTopic(ctx,
		connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "secret", PartitionCount: 1, ReplicationFactor: 3}))
	require.NoError(t, err)

	_, err = c.topics.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "wide", PartitionCount: 6, ReplicationFactor: 3}))
	require.NoError(t, err)
	// A broker that leads some partitions of "wide" and not others, once
	// every broker knows every leader and the ISRs are full.
	var (
		x           *Broker
		led, notLed []int32
	)
	testenv.Wait(t, 30*time.Second, "every partition of wide led with a full ISR, and secret known", func() error {
		x, led, notLed = nil, nil, nil
		for _, b := range c.brokers {
			tm, ok := b.metadata().Topic(c.tenantID, "wide")
			if !ok {
				return fmt.Errorf("broker %d does not know wide", b.cfg.ID)
			}
			if _, ok := b.metadata().Topic(su.Msg.GetTenant().GetId(), "secret"); !ok {
				return fmt.Errorf("broker %d does not know secret", b.cfg.ID)
			}
			for _, pm := range tm.Partitions {
				if pm.Leader < 0 || len(pm.ISR) < 3 {
					return fmt.Errorf("broker %d: wide/%d has leader %d, ISR %v", b.cfg.ID, pm.Partition, pm.Leader, pm.ISR)
				}
				if p := b.partition(tm.ID, pm.Partition); pm.Leader == b.cfg.ID && (p == nil || !p.LeadsAt(pm.LeaderEpoch)) {
					return fmt.Errorf("broker %d has not taken over wide/%d", b.cfg.ID, pm.Partition)
				}
			}
		}
		for _, b := range c.brokers {
			tm, _ := b.metadata().Topic(c.tenantID, "wide")
			var l, n []int32
			for _, pm := range tm.Partitions {
				if pm.Leader == b.cfg.ID {
					l = append(l, pm.Partition)
				} else {
					n = append(n, pm.Partition)
				}
			}
			if len(l) >= 2 && len(n) > 0 {
				x, led, notLed = b, l, n
				return nil
			}
		}
		return fmt.Errorf("no broker leads two partitions of wide and not all")
	})
	base := "http://" + x.cfg.Advertised()
	records := sluicev1connect.NewRecordServiceClient(hc, base, connect.WithInterceptors(tenants.Bearer(c.token)))

	entry := func(topic string, partition int32, data []byte) *sluicev1.ProducePartition {
		return &sluicev1.ProducePartition{Topic: topic, Partition: partition, Batches: &sluicev1.RecordBatches{Data: data}}
	}
	good := []*sluicev1.ProducePartition{entry("wide", led[0], plainBatch(t, 3)), entry("wide", led[1], plainBatch(t, 4))}
	bad := []*sluicev1.ProducePartition{
		entry("secret", 0, plainBatch(t, 1)),                  // another tenant's topic
		entry("wide", notLed[0], plainBatch(t, 1)),            // another broker leads it
		entry("wide", led[0], idempotentBatch(t, 2, 5)),       // sequence gap of an unknown producer
		entry("wide", led[1], corruptValue(plainBatch(t, 1))), // CRC mismatch
		entry("wide", 99, plainBatch(t, 1)),                   // no such partition
		entry("", 0, plainBatch(t, 1)),                        // no topic
		{Topic: "wide", Partition: led[0]},                    // no batches
	}
	req := &sluicev1.ProduceManyRequest{Acks: sluicev1.Acks_ACKS_ALL, Partitions: []*sluicev1.ProducePartition{good[0], bad[0], bad[1], bad[2], good[1], bad[3], bad[4], bad[5], bad[6]}}
	res, err := records.ProduceMany(ctx, connect.NewRequest(req))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetResults(), len(req.GetPartitions()))

	for i, e := range req.GetPartitions() {
		got := res.Msg.GetResults()[i]
		if e == good[0] || e == good[1] {
			require.Nil(t, got.GetError(), "entry %d (%s/%d) failed: %v", i, e.GetTopic(), e.GetPartition(), got.GetError())
			continue
		}
		single := connect.NewRequest(&sluicev1.ProduceRequest{Topic: e.GetTopic(), Partition: e.GetPartition(), Acks: sluicev1.Acks_ACKS_ALL,
			Payload: &sluicev1.ProduceRequest_Batches{Batches: e.GetBatches()}})
		if e.GetBatches() == nil {
			single.Msg.Payload = &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{}}
		}
		single.Header().Set(NoForwardHeader, "1")
		_, want := records.Produce(ctx, single)
		require.Error(t, want, "entry %d (%s/%d)", i, e.GetTopic(), e.GetPartition())
		var ce *connect.Error
		require.ErrorAs(t, want, &ce)
		pe := got.GetError()
		require.NotNil(t, pe, "entry %d (%s/%d) succeeded; Produce answers %v", i, e.GetTopic(), e.GetPartition(), want)
		require.Equal(t, ce.Code(), connect.Code(pe.GetCode()), "entry %d: %s", i, pe.GetMessage())
		require.Equal(t, ce.Message(), pe.GetMessage(), "entry %d", i)
		require.Len(t, pe.GetDetails(), len(ce.Details()), "entry %d", i)
		for j, d := range ce.Details() {
			require.Equal(t, "type.googleapis.com/"+d.Type(), pe.GetDetails()[j].GetTypeUrl(), "entry %d", i)
			require.Equal(t, d.Bytes(), pe.GetDetails()[j].GetValue(), "entry %d", i)
		}
		switch e {
		case bad[0], bad[4]:
			require.Equal(t, connect.CodeNotFound, ce.Code())
		case bad[1]:
			nl := &sluicev1.NotLeader{}
			require.Len(t, pe.GetDetails(), 1)
			require.NoError(t, pe.GetDetails()[0].UnmarshalTo(nl))
			require.NotEqual(t, x.cfg.ID, nl.GetLeaderId())
			require.Equal(t, x.metadata().Brokers[nl.GetLeaderId()].Address, nl.GetLeaderAddress())
		case bad[2]:
			perr := &sluicev1.ProducerError{}
			require.Len(t, pe.GetDetails(), 1)
			require.NoError(t, pe.GetDetails()[0].UnmarshalTo(perr))
			require.True(t, proto.Equal(&sluicev1.ProducerError{Reason: sluicev1.ProducerError_REASON_OUT_OF_ORDER_SEQUENCE, ExpectedSequence: -1}, perr), "%v", perr)
		case bad[3], bad[5], bad[6]:
			require.Equal(t, connect.CodeInvalidArgument, ce.Code())
		}
	}

	// acks=all: every replica holds each good entry at its offset when the
	// answer comes, and nothing of the bad entries was written.
	tm, _ := x.metadata().Topic(c.tenantID, "wide")
	for k, g := range good {
		r := res.Msg.GetResults()[map[int]int{0: 0, 1: 4}[k]]
		require.EqualValues(t, 0, r.GetBaseOffset(), "the first write to %s/%d", g.GetTopic(), g.GetPartition())
		end := r.GetBaseOffset() + int64(3+k)
		for _, b := range c.brokers {
			p := b.partition(tm.ID, g.GetPartition())
			require.NotNil(t, p, "broker %d", b.cfg.ID)
			require.Equal(t, end, p.Log().LEO(), "broker %d holds wide/%d up to %d at the answer", b.cfg.ID, g.GetPartition(), end)
		}
	}
}

// TestBrokerProduceManyBounds: a request with no entries, too many, or too
// many bytes, or with a bad acks value, is refused whole.
func TestBrokerProduceManyBounds(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	one := &sluicev1.ProducePartition{Topic: "bench", Batches: &sluicev1.RecordBatches{Data: plainBatch(t, 1)}}
	many := make([]*sluicev1.ProducePartition, records.MaxProduceManyEntries+1)
	for i := range many {
		many[i] = one
	}
	big := &sluicev1.ProducePartition{Topic: "bench", Batches: &sluicev1.RecordBatches{Data: make([]byte, records.MaxProduceManyBytes/2+1)}}
	for _, tc := range []struct {
		name string
		req  *sluicev1.ProduceManyRequest
	}{
		{"empty", &sluicev1.ProduceManyRequest{}},
		{"too many entries", &sluicev1.ProduceManyRequest{Partitions: many}},
		{"too many bytes", &sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{big, big}}},
		{"acks", &sluicev1.ProduceManyRequest{Acks: 9, Partitions: []*sluicev1.ProducePartition{one}}},
		{"timeout", &sluicev1.ProduceManyRequest{TimeoutMs: -1, Partitions: []*sluicev1.ProducePartition{one}}},
	} {
		_, err := pb.svc.ProduceMany(pb.ctx, connect.NewRequest(tc.req))
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)), "%s: %v", tc.name, err)
	}
	require.Zero(t, pb.p.Log().LEO(), "nothing written")

	// Entries of one partition are written in request order.
	entries := make([]*sluicev1.ProducePartition, 20)
	for i := range entries {
		entries[i] = &sluicev1.ProducePartition{Topic: "bench", Batches: &sluicev1.RecordBatches{Data: plainBatch(t, 2)}}
	}
	res, err := pb.svc.ProduceMany(pb.ctx, connect.NewRequest(&sluicev1.ProduceManyRequest{Acks: sluicev1.Acks_ACKS_LEADER, Partitions: entries}))
	require.NoError(t, err)
	for i, r := range res.Msg.GetResults() {
		require.Nil(t, r.GetError())
		require.EqualValues(t, 2*i, r.GetBaseOffset())
	}
}
