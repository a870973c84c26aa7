package connectapi

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// recordingAuth is an AuthService client that keeps the headers of the
// calls made to it and answers err, or a token.
type recordingAuth struct {
	headers []http.Header
	err     error
}

func (a *recordingAuth) CreateToken(_ context.Context, req *connect.Request[sluicev1.CreateTokenRequest]) (*connect.Response[sluicev1.CreateTokenResponse], error) {
	a.headers = append(a.headers, req.Header().Clone())
	if a.err != nil {
		return nil, a.err
	}
	return connect.NewResponse(&sluicev1.CreateTokenResponse{Token: "tok", TenantId: "t1", TenantName: "acme",
		ExpireTime: timestamppb.New(time.Unix(2_000_000_000, 0))}), nil
}

// TestKafkaExchangeSendsTheClientAddress: a Kafka client's API key is
// exchanged with the broker's credential and the client's host in
// Sluice-Client-Address (controlplane/api.ClientAddressHeader), which the
// control plane trusts from brokers only and limits failed logins by; a
// refused key comes back as the domain's authentication failure.
func TestKafkaExchangeSendsTheClientAddress(t *testing.T) {
	auth := &recordingAuth{}
	tok, err := KafkaExchange(auth, "broker-secret")(context.Background(), "slk_key", "192.0.2.7:51234")
	require.NoError(t, err)
	require.Equal(t, "acme", tok.TenantName)
	require.Equal(t, time.Unix(2_000_000_000, 0), tok.Expires.Local())
	require.Len(t, auth.headers, 1)
	require.Equal(t, "Bearer broker-secret", auth.headers[0].Get("Authorization"))
	require.Equal(t, "192.0.2.7", auth.headers[0].Get("Sluice-Client-Address"))

	auth.err = connect.NewError(connect.CodeUnauthenticated, errors.New("unknown API key"))
	_, err = KafkaExchange(auth, "broker-secret")(context.Background(), "slk_bad", "[2001:db8::1]:9092")
	require.ErrorIs(t, err, derr.AuthenticationFailed)
	require.Equal(t, "2001:db8::1", auth.headers[1].Get("Sluice-Client-Address"))
}
