package connectapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/partition"
)

// NoForwardHeader, set to "1" by routing clients, asks a broker to answer
// NotLeader instead of forwarding a request it cannot serve itself.
const NoForwardHeader = "Sluice-No-Forward"

// Forwardable reports whether a request refused with err may be forwarded
// to the leader: err is a NotLeader naming another broker, and the caller
// (headers h) did not ask to route itself.
func Forwardable(h http.Header, err error) bool {
	var nl *partition.NotLeaderError
	return errors.As(err, &nl) && nl.Leader >= 0 && !nl.Self && h.Get(NoForwardHeader) != "1"
}

// Forward sends the caller's request once to leader with call (a client
// of the leader's service), with the caller's credentials and
// NoForwardHeader, and returns the leader's answer; a failure to reach the
// leader is Unavailable. forwarded, when set, counts a forwarded answer.
func Forward[Req, Res any](ctx context.Context, leader int32, req *connect.Request[Req], call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), forwarded func()) (*connect.Response[Res], error) {
	out := connect.NewRequest(req.Msg)
	out.Header().Set("Authorization", req.Header().Get("Authorization"))
	out.Header().Set(NoForwardHeader, "1")
	res, err := call(ctx, out)
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, ce
		}
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("forward to leader %d: %w", leader, err))
	}
	if forwarded != nil {
		forwarded()
	}
	return connect.NewResponse(res.Msg), nil
}
