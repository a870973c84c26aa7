package partition

import (
	"context"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// These tests fake the control plane and leader brokers as Connect
// services answer; the adapters below turn them into the Host's calls as
// the broker wires them (dataplane/connectapi/peers.go): errors through
// connecterr, so the replicas see domain errors only.

func alterVia(f func(context.Context, *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error)) func(context.Context, *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error) {
	return func(ctx context.Context, req *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error) {
		res, err := f(ctx, connect.NewRequest(req))
		if err != nil {
			return connecterr.CurrentPartition(err), connecterr.FromConnect(err)
		}
		return res.Msg.GetPartition(), nil
	}
}

func alterManyVia(f func(context.Context, *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error)) func(context.Context, *sluicev1.AlterPartitionsRequest) ([]AlterResult, error) {
	return func(ctx context.Context, req *sluicev1.AlterPartitionsRequest) ([]AlterResult, error) {
		res, err := f(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, connecterr.FromConnect(err)
		}
		var out []AlterResult
		for _, r := range res.Msg.GetResults() {
			if e := r.GetError(); e != nil {
				out = append(out, AlterResult{Partition: e.GetCurrent(), Err: connecterr.FromAlterPartitionsError(e)})
				continue
			}
			out = append(out, AlterResult{Partition: r.GetPartition()})
		}
		return out, nil
	}
}

type leaderVia struct {
	c sluicev1connect.ReplicaServiceClient
}

func (l leaderVia) FetchReplicas(ctx context.Context, req *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
	res, err := l.c.FetchReplicas(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	return res.Msg, nil
}

func (l leaderVia) FetchReplica(ctx context.Context, req *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error) {
	res, err := l.c.FetchReplica(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	return res.Msg, nil
}

// codeOf is the Connect code a client reads for err (what the broker's
// handlers answer).
func codeOf(err error) connect.Code { return connect.CodeOf(connecterr.ToConnect(err)) }
