package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/kafka"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestProducePipelined: a connection's next produce is handled while the
// produce before it waits for its acknowledgements (its batches are
// appended), and the answers still go out in request order. Once a first
// record is written (the leader leads), replication is held at a gate
// (every follower fetch waits), so an acks=all produce cannot be
// acknowledged; an acks=0 and an acks=1 produce sent after it on the same
// connection, to the same partition, are appended meanwhile, and one
// between them refused whole (acks 2) does not hold them (the partition's
// log end, which OffsetForLeaderEpoch answers for the current epoch,
// reaches 4). Once the gate opens the acks=all produce is answered first,
// at offset 1, then the refused one, INVALID_REQUIRED_ACKS, then the acks=1
// one, at offset 3. Not parallel: the
// gate holds the whole cluster's replication for the moment it is shut.
func TestProducePipelined(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := client(t)
	adm := kadm.NewClient(cl)
	name := fmt.Sprintf("pipelined-%d", time.Now().UnixNano())
	createTopic(t, adm, name, 1)
	raw, pm := dialLeading(t, ctx, adm, name)

	gate := make(chan struct{})
	held := cluster.AddFault(localcluster.Fault{Procedure: "FetchReplicas", Hook: func(ctx context.Context, _ localcluster.Call) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(gate)
			held.Remove()
		}
	}
	defer open()

	produce := func(acks int16, value string) *kmsg.ProduceRequest {
		return produceRequest(name, acks, 30000, kafkaBatch(t, []byte(value)))
	}
	all, none, leader := produce(-1, "acks-all"), produce(0, "acks-none"), produce(1, "acks-leader")
	// A produce refused whole before it appends (acks 2) does not hold
	// the ones after it.
	bad := produce(2, "bad-acks")
	var corrs []int32
	for _, req := range []*kmsg.ProduceRequest{all, bad, none, leader} {
		corr, err := raw.Send(9, req)
		if err != nil {
			t.Fatal(err)
		}
		corrs = append(corrs, corr)
	}
	testenv.Wait(t, 30*time.Second, "the three valid produces appended while the first waits", func() error {
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = name
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.CurrentLeaderEpoch, rp.LeaderEpoch = pm.LeaderEpoch, pm.LeaderEpoch // an election fails loudly
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		res, err := req.RequestWith(ctx, cl.Broker(int(pm.Leader)))
		if err != nil {
			return err
		}
		p := res.Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			return fmt.Errorf("error %d", p.ErrorCode)
		}
		if p.EndOffset != 4 {
			return fmt.Errorf("log end %d", p.EndOffset)
		}
		return nil
	})
	open()
	for i, want := range []struct {
		req  *kmsg.ProduceRequest
		corr int32
		code int16
		base int64
	}{{all, corrs[0], 0, 1}, {bad, corrs[1], kerr.InvalidRequiredAcks.Code, -1}, {leader, corrs[3], 0, 3}} {
		res, corr, err := raw.Receive(9, want.req)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		p := res.(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if corr != want.corr || p.ErrorCode != want.code || p.BaseOffset != want.base {
			t.Fatalf("answer %d: correlation id %d, error %d, base offset %d; want %d, %d, %d", i+1, corr, p.ErrorCode, p.BaseOffset, want.corr, want.code, want.base)
		}
	}
}

// TestProduceAcksZeroRefusedCloses: an acks=0 produce has no answer, so a
// refused one (here to a topic that does not exist) closes the
// connection, as Kafka does: the client reconnects and refreshes its
// metadata rather than losing records in silence. One that is written
// keeps the connection.
func TestProduceAcksZeroRefusedCloses(t *testing.T) {
	t.Parallel()
	produce := func(topic string) *kmsg.ProduceRequest {
		return produceRequest(topic, 0, 10000, kafkaBatch(t, []byte("fire-and-forget")))
	}
	name := fmt.Sprintf("acks0-%d", time.Now().UnixNano())
	adm := kadm.NewClient(client(t))
	createTopic(t, adm, name, 1)
	ok, _ := dialLeading(t, t.Context(), adm, name)
	refused := kafka.DialRaw(t, ok.NC.RemoteAddr().String())
	if _, err := ok.Send(9, produce(name)); err != nil {
		t.Fatal(err)
	}
	if _, err := ok.RoundTrip(4, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("the connection after a written acks=0 produce: %v", err)
	}

	if err := refused.Login(tenantName, tenant.APIKey); err != nil {
		t.Fatal(err)
	}
	if _, err := refused.Send(9, produce(name+"-missing")); err != nil {
		t.Fatal(err)
	}
	if !refused.Closed() {
		t.Fatal("a refused acks=0 produce left the connection open")
	}
}

// dialLeading answers a raw connection, logged in, to the leader of the
// new topic name's partition 0 once it leads: Metadata names the leader a
// moment before it opened the partition and took the lead, and a produce
// meanwhile is refused, so it waits until one there is written (at offset
// 0). It asks adm, which created the topic (another client's broker may
// not know the leader yet), and answers the partition's metadata too.
func dialLeading(t *testing.T, ctx context.Context, adm *kadm.Client, name string) (*kafka.RawClient, kadm.PartitionDetail) {
	t.Helper()
	var raw *kafka.RawClient
	var pm kadm.PartitionDetail
	testenv.Wait(t, 30*time.Second, "the leader leads the new partition", func() error {
		md, err := adm.Metadata(ctx, name)
		if err != nil {
			return err
		}
		pm = md.Topics[name].Partitions[0]
		var addr string
		ok := false
		for _, b := range md.Brokers {
			if b.NodeID == pm.Leader {
				addr, ok = fmt.Sprintf("%s:%d", b.Host, b.Port), true
			}
		}
		if !ok {
			return fmt.Errorf("no leader known (%d)", pm.Leader)
		}
		if raw == nil || raw.NC.RemoteAddr().String() != addr {
			raw = kafka.DialRaw(t, addr)
			if err := raw.Login(tenantName, tenant.APIKey); err != nil {
				return err
			}
		}
		res, err := raw.RoundTrip(9, produceRequest(name, 1, 10000, kafkaBatch(t, []byte("first"))))
		if err != nil {
			raw = nil
			return err
		}
		if p := res.(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 0 {
			return fmt.Errorf("error %d, base offset %d", p.ErrorCode, p.BaseOffset)
		}
		return nil
	})
	return raw, pm
}

// produceRequest is a Produce of records (one Kafka RecordBatch) to
// partition 0 of topic, with acks and a timeout.
func produceRequest(topic string, acks int16, timeoutMs int32, records []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = acks, timeoutMs
	tp := kmsg.NewProduceRequestTopic()
	tp.Topic = topic
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = records
	tp.Partitions = append(tp.Partitions, pp)
	req.Topics = append(req.Topics, tp)
	return req
}
