package connectapi

import (
	"context"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/groups"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// Replicas is the ReplicaService, which only other brokers call (with the
// broker credential): followers' fetches on the leader, a follower
// broker's fetch session (FetchReplicas) and the per-partition fetch of
// followers that predate sessions (FetchReplica); the group lags this
// broker computed (ListGroupLags); and the transaction coordinators'
// marker writes and the operator's list of every transaction
// (Transactions' handlers).
type Replicas struct {
	sluicev1connect.UnimplementedReplicaServiceHandler
	d ReplicasDeps
}

// ReplicasDeps are what the ReplicaService answers from.
type ReplicasDeps struct {
	BrokerID int32
	// Sessions serves the followers' fetch sessions.
	Sessions *fetchsession.Sessions
	// Replica is this broker's replica of a partition, nil when it has
	// none.
	Replica func(topicID string, partition int32) *partition.Replica
	// Groups computes the group lags.
	Groups *groups.Service
	// Transactions answers WriteTxnMarkers and ListAllTransactions.
	Transactions *Transactions
}

// NewReplicas is the ReplicaService's handler.
func NewReplicas(d ReplicasDeps) *Replicas { return &Replicas{d: d} }

func (s *Replicas) FetchReplicas(ctx context.Context, req *connect.Request[sluicev1.FetchReplicasRequest]) (*connect.Response[sluicev1.FetchReplicasResponse], error) {
	res, err := s.d.Sessions.Fetch(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

func (s *Replicas) FetchReplica(ctx context.Context, req *connect.Request[sluicev1.FetchReplicaRequest]) (*connect.Response[sluicev1.FetchReplicaResponse], error) {
	m := req.Msg
	p := s.d.Replica(m.GetTopicId(), m.GetPartition())
	if p == nil {
		return nil, derr.Wrap(derr.NotFound, fmt.Errorf("partition %s/%d is not on broker %d", m.GetTopicId(), m.GetPartition(), s.d.BrokerID))
	}
	res, err := p.FetchReplica(ctx, m)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// ListGroupLags answers the last lag computation of the groups this broker
// coordinates (see the proto).
func (s *Replicas) ListGroupLags(ctx context.Context, _ *connect.Request[sluicev1.ListGroupLagsRequest]) (*connect.Response[sluicev1.ListGroupLagsResponse], error) {
	r, err := s.d.Groups.LagReport()
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListGroupLagsResponse{ComputeTime: timestamppb.New(r.ComputeTime)}
	for _, l := range r.Lags {
		res.Lags = append(res.Lags, &sluicev1.GroupPartitionLag{
			TenantId: l.TenantID, Group: l.Group, TopicId: l.TopicID, Topic: l.Topic,
			Partition: l.Partition, CommittedOffset: l.CommittedOffset,
			HighWatermark: l.HighWatermark, LogStartOffset: l.LogStartOffset,
			LagMessages: l.LagMessages, LagAgeMs: int64(l.LagSeconds * 1000), PartitionBytes: l.PartitionBytes,
		})
	}
	return connect.NewResponse(res), nil
}

// WriteTxnMarkers is Transactions.WriteTxnMarkers.
func (s *Replicas) WriteTxnMarkers(ctx context.Context, req *connect.Request[sluicev1.WriteTxnMarkersRequest]) (*connect.Response[sluicev1.WriteTxnMarkersResponse], error) {
	return s.d.Transactions.WriteTxnMarkers(ctx, req)
}

// ListAllTransactions is Transactions.ListAllTransactions.
func (s *Replicas) ListAllTransactions(ctx context.Context, req *connect.Request[sluicev1.ListAllTransactionsRequest]) (*connect.Response[sluicev1.ListAllTransactionsResponse], error) {
	return s.d.Transactions.ListAllTransactions(ctx, req)
}
