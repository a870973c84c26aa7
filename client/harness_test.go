package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// What the tests that drive the producer's and consumer's error paths
// need from the package's cluster besides its faults
// (localcluster.Fault): what the brokers wrote, batch by batch, and the
// calls the faults saw.

// clientWith is newClient with options.
func clientWith(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), endpoint, client.APIKey(apiKey), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// topicSeq numbers the topics freshTopic names.
var topicSeq atomic.Int64

// freshTopic is a topic name not used before in this process, for a test
// that may run again in it (-count).
func freshTopic(base string) string {
	return fmt.Sprintf("%s-%d", base, topicSeq.Add(1))
}

// addFault adds a fault to the package's cluster for the rest of the test.
func addFault(t *testing.T, f localcluster.Fault) *localcluster.FaultHandle {
	t.Helper()
	h := cluster.AddFault(f)
	t.Cleanup(h.Remove)
	return h
}

// everywhere adds f on the brokers and on the control plane (a call the
// client may make to either, such as GetMetadata) and returns both.
func everywhere(t *testing.T, f localcluster.Fault) [2]*localcluster.FaultHandle {
	t.Helper()
	onBrokers := addFault(t, f)
	f.Broker = localcluster.ControlPlane
	return [2]*localcluster.FaultHandle{onBrokers, addFault(t, f)}
}

// observe adds a fault with no effect on procedure for topic (any topic
// when empty): it records the calls.
func observe(t *testing.T, procedure, topic string) *localcluster.FaultHandle {
	t.Helper()
	return addFault(t, localcluster.Fault{Procedure: procedure, Topic: topic, Partition: localcluster.AnyPartition})
}

// gate is a Fault.Hook that holds each call until the gate opens (or the
// call's context ends).
type gate chan struct{}

func (g gate) hold(ctx context.Context, _ localcluster.Call) error {
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loggedBatch is one batch a broker's log holds.
type loggedBatch struct {
	pid           int64
	epoch         int16
	seq           int32
	transactional bool
	control       bool
	values        []string
	bytes         int // the batch's size
}

func (b loggedBatch) String() string {
	return fmt.Sprintf("{pid %d epoch %d seq %d: %d records, %d bytes}", b.pid, b.epoch, b.seq, len(b.values), b.bytes)
}

// tenantToken is a JWT for the package's tenant.
func tenantToken(t testing.TB) string {
	t.Helper()
	tok, err := sluicev1connect.NewAuthServiceClient(h2c.Client(), endpoint).CreateToken(t.Context(),
		connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey}))
	require.NoError(t, err)
	return tok.Msg.GetToken()
}

// logBatches is every batch in the log of topic's partition, read from
// its leader up to the high watermark (control batches included), once
// that covers at least want records (0: as it is now).
func logBatches(t *testing.T, topic string, partition int32, want int) []loggedBatch {
	t.Helper()
	hc := h2c.Client()
	auth := connect.WithInterceptors(tenants.Bearer(tenantToken(t)))
	var out []loggedBatch
	testenv.Wait(t, 30*time.Second, fmt.Sprintf("%d records in %s/%d below the high watermark", want, topic, partition), func() error {
		out = nil
		leaders, addrs, err := leadersOf(t.Context(), hc, auth, topic)
		if err != nil {
			return err
		}
		leader, ok := addrs[leaders[partition]]
		if !ok {
			return errors.New("no leader")
		}
		rc := sluicev1connect.NewRecordServiceClient(hc, "http://"+leader, auth)
		records := 0
		for off := int64(0); ; {
			res, err := rc.Fetch(t.Context(), connect.NewRequest(&sluicev1.FetchRequest{Topic: topic, Partition: partition, Offset: off,
				RawBatches: true, MaxBytes: 1 << 20, IsolationLevel: sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED}))
			if err != nil {
				return err
			}
			data := res.Msg.GetBatches().GetData()
			if len(data) == 0 {
				break
			}
			for len(data) > 0 {
				b, rest, err := record.ReadBatch(data)
				if err != nil {
					return err
				}
				h := b.Header()
				lb := loggedBatch{pid: h.ProducerID, epoch: h.ProducerEpoch, seq: h.BaseSequence,
					transactional: h.Attributes.Transactional(), control: h.Attributes.Control(), bytes: len(data) - len(rest)}
				if !lb.control {
					var it record.RecordIter
					if err := it.Reset(b); err != nil {
						return err
					}
					for it.Next() {
						lb.values = append(lb.values, string(it.Record().Value))
					}
					records += len(lb.values)
				}
				out = append(out, lb)
				off = b.LastOffset() + 1
				data = rest
			}
			if off >= res.Msg.GetHighWatermark() {
				break
			}
		}
		if records < want {
			return fmt.Errorf("%d records", records)
		}
		return nil
	})
	return out
}

// leadersOf is the leader of each partition of topic and the brokers'
// addresses, from the control plane.
func leadersOf(ctx context.Context, hc *http.Client, auth connect.ClientOption, topic string) (map[int32]int32, map[int32]string, error) {
	md, err := sluicev1connect.NewRecordServiceClient(hc, endpoint, auth).GetMetadata(ctx,
		connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{topic}}))
	if err != nil {
		return nil, nil, err
	}
	leaders, addrs := map[int32]int32{}, map[int32]string{}
	for _, tm := range md.Msg.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			leaders[pm.GetPartition()] = pm.GetLeader()
		}
	}
	for _, b := range md.Msg.GetBrokers() {
		addrs[b.GetId()] = b.GetAddress()
	}
	return leaders, addrs, nil
}

// ledByOne is the partitions of topic that the broker leading the most of
// them leads, in order.
func ledByOne(t *testing.T, topic string) []int32 {
	t.Helper()
	leaders, _, err := leadersOf(t.Context(), h2c.Client(), connect.WithInterceptors(tenants.Bearer(tenantToken(t))), topic)
	require.NoError(t, err)
	by := map[int32][]int32{}
	var most []int32
	for p := range int32(len(leaders)) {
		l := leaders[p]
		by[l] = append(by[l], p)
		if len(by[l]) > len(most) {
			most = by[l]
		}
	}
	return most
}

// countIn is how many times value v was written in batches.
func countIn(batches []loggedBatch, v string) int {
	n := 0
	for _, b := range batches {
		n += countOf(b.values, v)
	}
	return n
}

// dataBatches is batches without the control batches.
func dataBatches(batches []loggedBatch) []loggedBatch {
	var out []loggedBatch
	for _, b := range batches {
		if !b.control {
			out = append(out, b)
		}
	}
	return out
}

// partitionMeta is one partition as the control plane's metadata has it.
type partitionMeta struct {
	topicID  string
	leader   int32
	epoch    int32
	replicas []int32
	addrs    map[int32]string // every broker's
}

// partitionOf is partition of topic from the control plane's metadata.
func partitionOf(t *testing.T, topic string, partition int32) partitionMeta {
	t.Helper()
	md, err := sluicev1connect.NewRecordServiceClient(h2c.Client(), endpoint, connect.WithInterceptors(tenants.Bearer(tenantToken(t)))).GetMetadata(t.Context(),
		connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{topic}}))
	require.NoError(t, err)
	out := partitionMeta{addrs: map[int32]string{}}
	for _, b := range md.Msg.GetBrokers() {
		out.addrs[b.GetId()] = b.GetAddress()
	}
	for _, tm := range md.Msg.GetTopics() {
		for _, pm := range tm.GetPartitions() {
			if tm.GetName() == topic && pm.GetPartition() == partition {
				out.topicID, out.leader, out.epoch, out.replicas = tm.GetId(), pm.GetLeader(), pm.GetLeaderEpoch(), pm.GetReplicas()
				return out
			}
		}
	}
	t.Fatalf("no partition %s/%d in the metadata", topic, partition)
	return out
}
