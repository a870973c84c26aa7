package connecterr

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicemq/sluice/dataplane/derr"
)

// TestRelay: a peer's answer relayed is answered to the client exactly as
// the peer gave it (the very Connect error: code, message, details), also
// wrapped; as a domain error its kind comes from its details or code, its
// text is the peer's message, and its leader hint is a *NotLeaderError.
func TestRelay(t *testing.T) {
	t.Parallel()
	nl := &derr.NotLeaderError{TopicID: "ts", Partition: 3, Leader: 2, Epoch: 4, Address: "b2"}
	taking := &derr.NotLeaderError{TopicID: "ts", Partition: 3, Leader: 2, Epoch: 4, Address: "b2", Self: true}
	quota := ToConnect(&derr.Error{Kind: derr.PolicyViolation, Err: errors.New("over"), Quota: &derr.QuotaViolation{Tenant: "t1", Limit: "max_groups_per_transaction"}})
	for _, c := range []struct {
		name string
		peer error // the peer's answer, as its adapter mapped it
		kind derr.Kind
		nl   *derr.NotLeaderError
	}{
		{"not the leader", ToConnect(nl), derr.NotLeaderOrFollower, nl},
		{"taking over", ToConnect(taking), derr.LeaderNotAvailable, taking},
		{"fenced", ToConnect(&derr.Error{Kind: derr.ProducerFenced, Err: errors.New("producer fenced"), Txn: derr.TxnReasonProducerFenced}), derr.ProducerFenced, nil},
		{"unknown member", ToConnect(&derr.Error{Kind: derr.UnknownMemberID, Err: errors.New("who"), Group: derr.GroupReasonUnknownMember}), derr.UnknownMemberID, nil},
		{"over a count limit", quota, derr.PolicyViolation, nil},
		{"over a rate", ToConnect(&derr.Error{Kind: derr.ThrottlingQuotaExceeded, Err: errors.New("slow down"), RetryAfter: time.Second,
			Quota: &derr.QuotaViolation{Tenant: "t1", Limit: "produce_bytes_per_sec"}}), derr.ResourceExhausted, nil},
		{"unreachable", connect.NewError(connect.CodeUnavailable, errors.New("dial tcp: refused")), derr.Unavailable, nil},
	} {
		var ce *connect.Error
		require.ErrorAs(t, c.peer, &ce, c.name)
		r := Relay(c.peer)
		require.ErrorIs(t, r, c.kind, c.name)
		k, _ := derr.KindOf(r)
		require.Equal(t, c.kind, k, c.name)
		require.Equal(t, ce.Message(), r.Error(), c.name)
		require.Same(t, ce, ToConnect(r), "%s: answered as the peer did", c.name)
		require.Same(t, ce, ToConnect(fmt.Errorf("verify: %w", r)), c.name)
		var got *derr.NotLeaderError
		if c.nl == nil {
			require.False(t, errors.As(r, &got), c.name)
			continue
		}
		require.ErrorAs(t, r, &got, c.name)
		require.Equal(t, *c.nl, *got, c.name)
	}
	requireDetails(t, ToConnect(Relay(quota)), &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:t1", Description: "max_groups_per_transaction"}}})
	plain := errors.New("plain")
	require.Same(t, plain, Relay(plain))
	require.NoError(t, Relay(nil))
}
