package connectapi

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connecterr"
)

// ErrorInterceptor maps errors once at the seam: Connect errors pass,
// domain errors get their codes and details (connecterr.ToConnect),
// context errors become Canceled/DeadlineExceeded, and anything else is
// logged and answered as a generic Internal error.
type ErrorInterceptor struct{ Logger *slog.Logger }

// MapErr is err as the handler of procedure answers it.
func (e ErrorInterceptor) MapErr(ctx context.Context, procedure string, err error) error {
	if err == nil {
		return nil
	}
	err = connecterr.ToConnect(err)
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce
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
