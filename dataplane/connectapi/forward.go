package connectapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
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
// to the leader: err is a NotLeader naming another broker whose address
// the view knows, and the caller (headers h) did not ask to route itself.
// A leader without a known address (its broker left the live list; the
// view still names it) is not called: the caller gets the NotLeader, with
// the leader hint, as a client that routes itself would.
func Forwardable(h http.Header, err error) bool {
	var nl *partition.NotLeaderError
	return errors.As(err, &nl) && nl.Leader >= 0 && !nl.Self && nl.Address != "" && h.Get(NoForwardHeader) != "1"
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

// ForwardedHeader marks a request one broker sends another on behalf of
// its client, with the client's credential (Forward, and the group and
// transaction calls that go to a coordinator elsewhere): the client's
// request was counted where it arrived, so the broker it is forwarded to
// does not count it again. Its value is an HMAC of the request's
// Authorization header keyed with the broker credential, so a tenant
// cannot set it to go uncounted.
const ForwardedHeader = "Sluice-Forwarded"

func forwardMAC(brokerToken, authorization string) string {
	m := hmac.New(sha256.New, []byte(brokerToken))
	m.Write([]byte("sluice forwarded request\x00"))
	m.Write([]byte(authorization))
	return hex.EncodeToString(m.Sum(nil))
}

// ForwardedByBroker reports whether h carries a broker's valid
// ForwardedHeader.
func ForwardedByBroker(h http.Header, brokerToken string) bool {
	v := h.Get(ForwardedHeader)
	return v != "" && hmac.Equal([]byte(v), []byte(forwardMAC(brokerToken, h.Get("Authorization"))))
}

// ForwardMarker is the client interceptor of the clients a broker calls
// other brokers' tenant services with: it sets ForwardedHeader.
type ForwardMarker struct{ BrokerToken string }

func (m ForwardMarker) mark(h http.Header) {
	if a := h.Get("Authorization"); a != "" {
		h.Set(ForwardedHeader, forwardMAC(m.BrokerToken, a))
	}
}

func (m ForwardMarker) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			m.mark(req.Header())
		}
		return next(ctx, req)
	}
}

func (m ForwardMarker) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		m.mark(conn.RequestHeader())
		return conn
	}
}

func (ForwardMarker) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
