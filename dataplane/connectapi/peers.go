package connectapi

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// The calls partition replicas make through partition.Host, and the
// record service's reservation of producer ids, go out over Connect;
// their errors come back as domain errors (connecterr.FromConnect), so no
// replica or service reads a Connect code.

// LeaderClient is a leader broker's ReplicaService as a replica's fetcher
// calls it (fetcher.LeaderClient, dataplane/partition/fetcher).
type LeaderClient struct {
	C sluicev1connect.ReplicaServiceClient
}

func (l LeaderClient) FetchReplicas(ctx context.Context, req *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
	res, err := l.C.FetchReplicas(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	return res.Msg, nil
}

func (l LeaderClient) FetchReplica(ctx context.Context, req *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error) {
	res, err := l.C.FetchReplica(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	return res.Msg, nil
}

// AlterPartition sends one ISR proposal to the controller
// (partition.Host.AlterPartition): the new state, or the refusal with the
// partition's current state when it carries one.
func AlterPartition(call func(context.Context, *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error)) func(context.Context, *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error) {
	return func(ctx context.Context, req *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error) {
		res, err := call(ctx, connect.NewRequest(req))
		if err != nil {
			return connecterr.CurrentPartition(err), connecterr.FromConnect(err)
		}
		return res.Msg.GetPartition(), nil
	}
}

// AlterPartitions sends many ISR proposals to the controller in one call
// (partition.Host.AlterPartitions), each item's answer translated as
// AlterPartition translates its own.
func AlterPartitions(call func(context.Context, *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error)) func(context.Context, *sluicev1.AlterPartitionsRequest) ([]partition.AlterResult, error) {
	return func(ctx context.Context, req *sluicev1.AlterPartitionsRequest) ([]partition.AlterResult, error) {
		res, err := call(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, connecterr.FromConnect(err)
		}
		out := make([]partition.AlterResult, len(res.Msg.GetResults()))
		for i, r := range res.Msg.GetResults() {
			if e := r.GetError(); e != nil {
				out[i] = partition.AlterResult{Partition: e.GetCurrent(), Err: connecterr.FromAlterPartitionsError(e)}
				continue
			}
			out[i] = partition.AlterResult{Partition: r.GetPartition()}
		}
		return out, nil
	}
}

// AllocateProducerIDs reserves a block of producer ids for broker at its
// current epoch (brokerEpoch) from the control plane with call, its
// BrokerService.AllocateProducerIds (records.Deps.AllocateProducerIDs).
// The refusals are domain errors: Unavailable (retry) before the broker
// has registered or when the control plane reserves nothing (a stale
// epoch: the broker is registering again), Internal for an empty block.
func AllocateProducerIDs(call func(context.Context, *connect.Request[sluicev1.AllocateProducerIdsRequest]) (*connect.Response[sluicev1.AllocateProducerIdsResponse], error), broker int32, brokerEpoch func() int64, logger *slog.Logger) func(context.Context) (int64, int32, error) {
	return func(ctx context.Context) (int64, int32, error) {
		epoch := brokerEpoch()
		if epoch == 0 {
			return 0, 0, derr.New(derr.Unavailable, "this broker has not registered with the control plane yet; retry")
		}
		res, err := call(ctx, connect.NewRequest(&sluicev1.AllocateProducerIdsRequest{BrokerId: broker, BrokerEpoch: epoch}))
		if err != nil {
			logger.Warn("reserve producer ids", "err", err)
			return 0, 0, derr.New(derr.Unavailable, "could not reserve producer ids from the control plane; retry: %w", connecterr.FromConnect(err))
		}
		if res.Msg.GetCount() <= 0 || res.Msg.GetFirstProducerId() < 0 {
			return 0, 0, derr.New(derr.Internal, "control plane returned an empty producer-id block")
		}
		logger.Info("reserved producer ids", "first", res.Msg.GetFirstProducerId(), "count", res.Msg.GetCount())
		return res.Msg.GetFirstProducerId(), res.Msg.GetCount(), nil
	}
}

// CodeName is the name of the Connect code err maps to ("unknown"
// for an error that maps to none), for metric labels of failed calls.
func CodeName(err error) string { return connect.CodeOf(connecterr.ToConnect(err)).String() }

// FetchErrorAnswer says a partition's failure to a follower in its
// session's answer: the Connect code and message the error maps to
// (Internal for one that maps to none).
func FetchErrorAnswer(err error) (uint32, string) {
	var ce *connect.Error
	if errors.As(connecterr.ToConnect(err), &ce) {
		return uint32(ce.Code()), ce.Error()
	}
	return uint32(connect.CodeInternal), err.Error()
}
