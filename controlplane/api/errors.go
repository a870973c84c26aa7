package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/store"
)

// toConnectError maps a domain error to a Connect error, once, at the API
// seam. Unknown errors become Internal with a generic message; the detail
// goes to the log only.
func toConnectError(ctx context.Context, logger *slog.Logger, procedure string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	var fe *fieldError
	var ae *store.AlreadyExistsError
	var le *store.LimitError
	switch {
	case errors.As(err, &fe):
		return connect.NewError(connect.CodeInvalidArgument, fe)
	case errors.As(err, &ae):
		return connect.NewError(connect.CodeAlreadyExists, ae)
	case errors.As(err, &le):
		return connect.NewError(connect.CodeResourceExhausted, le)
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, errors.New("not found"))
	case errors.Is(err, store.ErrConflict):
		return connect.NewError(connect.CodeAborted, errors.New("concurrent change; retry"))
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("deadline exceeded"))
	}
	logger.ErrorContext(ctx, "internal error", "procedure", procedure, "err", err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// errorInterceptor applies toConnectError to every handler's error, unary
// and streaming, so handlers can return domain and validation errors as
// they are.
type errorInterceptor struct{ logger *slog.Logger }

func (e errorInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err != nil && !req.Spec().IsClient {
			return nil, toConnectError(ctx, e.logger, req.Spec().Procedure, err)
		}
		return res, err
	}
}

func (e errorInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e errorInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return toConnectError(ctx, e.logger, conn.Spec().Procedure, next(ctx, conn))
	}
}

func notFound(format string, args ...any) error {
	return connect.NewError(connect.CodeNotFound, errorf(format, args...))
}

func failedPrecondition(format string, args ...any) error {
	return connect.NewError(connect.CodeFailedPrecondition, errorf(format, args...))
}

func permissionDenied(format string, args ...any) error {
	return connect.NewError(connect.CodePermissionDenied, errorf(format, args...))
}

func unauthenticated(format string, args ...any) error {
	return connect.NewError(connect.CodeUnauthenticated, errorf(format, args...))
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
