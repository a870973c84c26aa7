package broker

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/partition"
)

// toConnect maps the data plane's domain errors to Connect errors with
// details a client can act on: the one mapping (connecterr.ToConnect), for
// the broker's handlers and the NotLeader answers it builds itself.
func toConnect(err error) error { return connecterr.ToConnect(err) }

// notLeader builds the error for a partition this broker does not lead, as
// pm describes it (NotLeader with the leader's address from this broker's
// view).
func (b *Broker) notLeader(pm partMeta) error {
	return &partition.NotLeaderError{TopicID: pm.topicID, Partition: pm.partition, Leader: pm.leader, Epoch: pm.leaderEpoch, Self: pm.leader == b.cfg.ID, Address: b.brokerAddress(pm.leader)}
}

// brokerAddress is the address of broker id in this broker's view, "" when
// the view does not name it.
func (b *Broker) brokerAddress(id int32) string { return b.metadata().brokers[id].address }

// errorInterceptor maps errors once at the seam: Connect errors pass, domain
// errors get their codes and details (toConnect), context errors
// become Canceled/DeadlineExceeded, and anything else is logged and
// answered as a generic Internal error.
type errorInterceptor struct{ logger *slog.Logger }

func (e errorInterceptor) mapErr(ctx context.Context, procedure string, err error) error {
	if err == nil {
		return nil
	}
	err = toConnect(err)
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
	}
	e.logger.ErrorContext(ctx, "internal error", "procedure", procedure, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

func (e errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err != nil && !req.Spec().IsClient {
			return nil, e.mapErr(ctx, req.Spec().Procedure, err)
		}
		return res, err
	}
}

func (e errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return e.mapErr(ctx, conn.Spec().Procedure, next(ctx, conn))
	}
}

// asConnect is err as the Connect error a client reads (toConnect; an
// error that maps to none is Internal), for code that still builds on a
// *connect.Error.
func asConnect(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(toConnect(err), &ce) {
		return ce
	}
	return connect.NewError(connect.CodeInternal, err)
}
