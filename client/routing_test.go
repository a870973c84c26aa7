package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// routeFake is one of two fake brokers of a one-partition topic that
// broker 1 leads at leader epoch 2, for the client's routing after a
// wrong leader hint. Both answer metadata; produce answers come from
// answer (nil: written).
type routeFake struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	sluicev1connect.UnimplementedAuthServiceHandler
	id       int32
	cluster  *routeCluster
	produces atomic.Int64
	answer   func(n int64) error // n: this broker's produce count, from 1
}

type routeCluster struct {
	addrs [2]string
}

const routeTopicID = "topic-orders"

func (f *routeFake) CreateToken(context.Context, *connect.Request[sluicev1.CreateTokenRequest]) (*connect.Response[sluicev1.CreateTokenResponse], error) {
	return connect.NewResponse(&sluicev1.CreateTokenResponse{Token: "t", ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}), nil
}

func (f *routeFake) GetMetadata(_ context.Context, r *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	res := &sluicev1.GetMetadataResponse{Brokers: []*sluicev1.BrokerAddress{{Id: 1, Address: f.cluster.addrs[0]}, {Id: 2, Address: f.cluster.addrs[1]}}}
	for _, t := range r.Msg.GetTopics() {
		res.Topics = append(res.Topics, &sluicev1.TopicMetadata{Name: t, Id: routeTopicID,
			Partitions: []*sluicev1.PartitionMetadata{{Partition: 0, Leader: 1, LeaderEpoch: 2, Replicas: []int32{1, 2}, Isr: []int32{1, 2}}}})
	}
	return connect.NewResponse(res), nil
}

func (f *routeFake) Produce(context.Context, *connect.Request[sluicev1.ProduceRequest]) (*connect.Response[sluicev1.ProduceResponse], error) {
	n := f.produces.Add(1)
	if err := f.answer(n); err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ProduceResponse{BaseOffset: n}), nil
}

// notLeader is a NotLeader refusal, as a broker answers it.
func notLeader(nl *sluicev1.NotLeader) error {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("not the leader"))
	d, err := connect.NewErrorDetail(nl)
	if err != nil {
		panic(err)
	}
	ce.AddDetail(d)
	return ce
}

// startRouteFakes serves two brokers and returns a client of them.
func startRouteFakes(t *testing.T, b1, b2 *routeFake) *client.Client {
	t.Helper()
	rc := &routeCluster{}
	for i, f := range []*routeFake{b1, b2} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		f.id, f.cluster, rc.addrs[i] = int32(i+1), rc, ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle(sluicev1connect.NewRecordServiceHandler(f))
		mux.Handle(sluicev1connect.NewAuthServiceHandler(f))
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv := &http.Server{Handler: mux, Protocols: &p}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	c, err := client.New(t.Context(), "http://"+rc.addrs[0], client.Token("x"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRoutingRecoversFromAWrongLeaderHint is issue 29's wedge: the leader
// of a partition (broker 1, leader epoch 2) refuses a produce once with a
// NotLeader hint that is not about the partition (the transaction-state
// partition's leader, broker 2 at its leader epoch 4, as a broker
// verifying a transactional produce answered before the fix); broker 2
// answers with the real leader at epoch 2. The producer must get its
// record written: a hint naming another partition is not followed, and a
// hint without a partition (from an older broker) is followed once, after
// which broker 2's refusal at an older epoch makes the client refresh its
// metadata instead of ignoring it.
func TestRoutingRecoversFromAWrongLeaderHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		hintTopic string // "": a broker that names no partition
		maxTo2    int64  // produces broker 2 may receive
	}{
		{"the hint names the transaction-state partition", "txn-state-topic", 0},
		{"the hint names no partition", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b1, b2 := &routeFake{}, &routeFake{}
			b1.answer = func(n int64) error {
				if n == 1 {
					return notLeader(&sluicev1.NotLeader{TopicId: tc.hintTopic, Partition: 3, LeaderId: 2, LeaderAddress: b2.cluster.addrs[1], LeaderEpoch: 4})
				}
				return nil
			}
			b2.answer = func(int64) error {
				return notLeader(&sluicev1.NotLeader{TopicId: routeTopicID, Partition: 0, LeaderId: 1, LeaderAddress: b1.cluster.addrs[0], LeaderEpoch: 2})
			}
			c := startRouteFakes(t, b1, b2)
			p, err := c.NewProducer(t.Context(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader),
				client.WithDeliveryTimeout(15*time.Second))
			require.NoError(t, err)
			defer p.Close(context.Background())
			require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: "orders", Value: []byte("v")}),
				"produces to broker 1: %d, to broker 2: %d", b1.produces.Load(), b2.produces.Load())
			require.EqualValues(t, 2, b1.produces.Load(), "refused once, then written")
			require.LessOrEqual(t, b2.produces.Load(), tc.maxTo2, "produces sent where the wrong hint pointed")
		})
	}
}
