package broker

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// The calls partition replicas make through partition.Host go out over
// Connect; their errors come back as domain errors
// (connecterr.FromConnect), so no replica reads a Connect code.

// leaderClient is a leader broker's ReplicaService as a replica's fetcher
// calls it (partition.LeaderClient).
type leaderClient struct {
	c sluicev1connect.ReplicaServiceClient
}

func (l leaderClient) FetchReplicas(ctx context.Context, req *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
	res, err := l.c.FetchReplicas(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	return res.Msg, nil
}

func (l leaderClient) FetchReplica(ctx context.Context, req *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error) {
	res, err := l.c.FetchReplica(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	return res.Msg, nil
}

// alterPartition sends one ISR proposal to the controller
// (partition.Host.AlterPartition): the new state, or the refusal with the
// partition's current state when it carries one.
func alterPartition(call func(context.Context, *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error)) func(context.Context, *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error) {
	return func(ctx context.Context, req *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error) {
		res, err := call(ctx, connect.NewRequest(req))
		if err != nil {
			return connecterr.CurrentPartition(err), connecterr.FromConnect(err)
		}
		return res.Msg.GetPartition(), nil
	}
}

// alterPartitions sends many ISR proposals to the controller in one call
// (partition.Host.AlterPartitions), each item's answer translated as
// alterPartition translates its own.
func alterPartitions(call func(context.Context, *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error)) func(context.Context, *sluicev1.AlterPartitionsRequest) ([]partition.AlterResult, error) {
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

// connectCodeName is the name of the Connect code err maps to ("unknown"
// for an error that maps to none), for metric labels of failed calls.
func connectCodeName(err error) string { return connect.CodeOf(toConnect(err)).String() }

// fetchErrorAnswer says a partition's failure to a follower in its
// session's answer: the Connect code and message the error maps to
// (Internal for one that maps to none).
func fetchErrorAnswer(err error) (uint32, string) {
	var ce *connect.Error
	if errors.As(toConnect(err), &ce) {
		return uint32(ce.Code()), ce.Error()
	}
	return uint32(connect.CodeInternal), err.Error()
}
