package connectapi

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/endpoint"
)

// ErrorInterceptor maps errors once at the seam: Connect errors pass,
// domain errors get their codes and details (connecterr.ToConnect),
// context errors become Canceled/DeadlineExceeded, and anything else is
// logged and answered as a generic Internal error. A call that came in on
// an external listener gets the leader's external address in a NotLeader
// detail, when Node knows one.
type ErrorInterceptor struct {
	Logger *slog.Logger
	// Node is a broker of the current cluster view (nil: addresses are
	// left as they are).
	Node func(id int32) (cluster.Node, bool)
}

// MapErr is err as the handler of procedure answers it.
func (e ErrorInterceptor) MapErr(ctx context.Context, procedure string, err error) error {
	if err == nil {
		return nil
	}
	err = connecterr.ToConnect(err)
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return e.external(ctx, ce)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
	}
	e.Logger.ErrorContext(ctx, "internal error", "procedure", procedure, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

func (e ErrorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err != nil && !req.Spec().IsClient {
			return nil, e.MapErr(ctx, req.Spec().Procedure, err)
		}
		return res, err
	}
}

func (e ErrorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e ErrorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return e.MapErr(ctx, conn.Spec().Procedure, next(ctx, conn))
	}
}

// AsConnect is err as the Connect error a client reads (ToConnect; an
// error that maps to none is Internal), for code that builds on a
// *connect.Error.
func AsConnect(err error) *connect.Error {
	var ce *connect.Error
	if errors.As(connecterr.ToConnect(err), &ce) {
		return ce
	}
	return connect.NewError(connect.CodeInternal, err)
}

// external is ce with the leader address of its NotLeader detail replaced
// by the leader's external address, for a call that came in on an
// external listener (endpoint.For); ce itself otherwise.
func (e ErrorInterceptor) external(ctx context.Context, ce *connect.Error) *connect.Error {
	if e.Node == nil || !endpoint.IsExternal(ctx) {
		return ce
	}
	out := connect.NewError(ce.Code(), errors.New(ce.Message()))
	changed := false
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if nl, ok := v.(*sluicev1.NotLeader); ok {
				if n, ok := e.Node(nl.GetLeaderId()); ok && n.ExternalAddress != "" {
					nl = proto.CloneOf(nl)
					nl.LeaderAddress = n.ExternalAddress
					if nd, err := connect.NewErrorDetail(nl); err == nil {
						out.AddDetail(nd)
						changed = true
						continue
					}
				}
			}
		}
		out.AddDetail(d)
	}
	if !changed {
		return ce
	}
	for k, vs := range ce.Meta() {
		out.Meta()[k] = vs
	}
	return out
}
