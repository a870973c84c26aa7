package broker

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/txns"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// The broker credential may read offsets and records for a named tenant
// (the group lag metrics); nothing else, and a tenant's token can never
// name another tenant.
func TestBrokerCredentialActsForATenantOnlyToRead(t *testing.T) {
	t.Parallel()
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(t, err)
	iss.SetKeys([]tenants.SigningKey{k})
	tenantTok, _, err := iss.Mint(time.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: []string{tenants.ScopeConsume, tenants.ScopeProduce}})
	require.NoError(t, err)
	const brokerTok = "broker-token-0123456789"
	a := &authenticator{
		verifier:    tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice"}, iss.KeySource()),
		revoked:     newRevocations(),
		brokerToken: brokerTok,
	}
	a.revoked.loaded.Store(true)
	headers := func(tok, tenant string) http.Header {
		h := http.Header{"Authorization": []string{"Bearer " + tok}}
		if tenant != "" {
			h.Set(actForTenantHeader, tenant)
		}
		return h
	}
	ctx := context.Background()

	for _, proc := range []string{sluicev1connect.RecordServiceListOffsetsProcedure, sluicev1connect.RecordServiceFetchProcedure} {
		p, err := a.Authenticate(ctx, proc, headers(brokerTok, "t2"))
		require.NoError(t, err, proc)
		require.Equal(t, tenants.PrincipalBroker, p.Kind)
		require.Equal(t, "t2", p.TenantID)

		_, err = a.Authenticate(ctx, proc, headers(tenantTok, "t2"))
		require.ErrorIs(t, err, tenants.ErrInvalidToken, "%s: a tenant's token naming a tenant", proc)
		_, err = a.Authenticate(ctx, proc, headers("broker-token-wrong-0000", "t2"))
		require.ErrorIs(t, err, tenants.ErrInvalidToken, "%s: a wrong broker credential", proc)
		_, err = a.Authenticate(ctx, proc, headers(brokerTok, ""))
		require.Error(t, err, "%s: the broker credential without a tenant", proc)

		p, err = a.Authenticate(ctx, proc, headers(tenantTok, ""))
		require.NoError(t, err, proc)
		require.Equal(t, "t1", p.TenantID, "tenants still read as themselves")
	}
	for _, proc := range []string{sluicev1connect.RecordServiceProduceProcedure, sluicev1connect.GroupServiceCommitOffsetsProcedure, sluicev1connect.GroupServiceDescribeGroupProcedure} {
		_, err := a.Authenticate(ctx, proc, headers(brokerTok, "t2"))
		require.Error(t, err, "%s: the broker credential may not act for a tenant", proc)
		p, err := a.Authenticate(ctx, proc, headers(tenantTok, "t2"))
		require.NoError(t, err, proc)
		require.Equal(t, "t1", p.TenantID, "%s: the header does not change a tenant's identity", proc)
	}
}

// TestBrokerRefusesSuspendedTenants: a tenant in the feed's suspended set is
// refused with PermissionDenied ("tenant is suspended"), another tenant is
// not; a set without it (reinstated) lets the same token through again, and
// a long poll of a tenant ends when it is suspended.
func TestBrokerRefusesSuspendedTenants(t *testing.T) {
	t.Parallel()
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(t, err)
	iss.SetKeys([]tenants.SigningKey{k})
	mint := func(tenant string) http.Header {
		tok, _, err := iss.Mint(time.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: tenant, APIKeyID: "0123456789abcdef", Scopes: tenants.AllScopes()})
		require.NoError(t, err)
		return http.Header{"Authorization": []string{"Bearer " + tok}}
	}
	a := &authenticator{
		verifier:    tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice"}, iss.KeySource()),
		revoked:     newRevocations(),
		brokerToken: "broker-token-0123456789",
	}
	a.revoked.loaded.Store(true)
	t1, t2 := mint("t1"), mint("t2")
	ctx := context.Background()

	a.revoked.setSuspended([]string{"t1"})
	for _, proc := range []string{
		sluicev1connect.RecordServiceProduceProcedure, sluicev1connect.RecordServiceFetchProcedure,
		sluicev1connect.RecordServiceGetMetadataProcedure, sluicev1connect.GroupServiceGroupHeartbeatProcedure,
	} {
		_, err := a.Authenticate(ctx, proc, t1)
		require.ErrorIs(t, err, tenants.ErrPermissionDenied, proc)
		require.ErrorContains(t, err, "tenant is suspended", proc)
		p, err := a.Authenticate(ctx, proc, t2)
		require.NoError(t, err, "%s: another tenant is unaffected", proc)
		require.Equal(t, "t2", p.TenantID)
	}

	// A long poll of t2 ends when t2 is suspended, with the cause.
	lp, stop := a.revoked.untilSuspended(ctx, "t2")
	defer stop()
	a.revoked.setSuspended([]string{"t1"}) // the same set: nothing changes
	select {
	case <-lp.Done():
		t.Fatal("a long poll ended though its tenant is not suspended")
	default:
	}
	a.revoked.setSuspended([]string{"t1", "t2"})
	<-lp.Done()
	require.ErrorIs(t, context.Cause(lp), errTenantSuspended)

	// Reinstated: the same tokens work again.
	a.revoked.setSuspended(nil)
	_, err = a.Authenticate(ctx, sluicev1connect.RecordServiceProduceProcedure, t1)
	require.NoError(t, err)
	_, err = a.Authenticate(ctx, sluicev1connect.RecordServiceProduceProcedure, t2)
	require.NoError(t, err)
}

// TestBrokerTokenCacheKeepsRevocation: the broker's verifier remembers a
// token after its first call, and a remembered token is still refused at
// once when its API key's revocation reaches the broker, when its tenant
// is suspended, and when it expires.
func TestBrokerTokenCacheKeepsRevocation(t *testing.T) {
	t.Parallel()
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(t, err)
	iss.SetKeys([]tenants.SigningKey{k})
	var clock atomic.Pointer[time.Time]
	now := time.Now()
	clock.Store(&now)
	v := tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice", CacheSize: tokenCacheSize, Now: func() time.Time { return *clock.Load() }}, iss.KeySource())
	a := &authenticator{verifier: v, revoked: newRevocations(), brokerToken: "broker-token-0123456789"}
	a.revoked.loaded.Store(true)
	mint := func(tenant, keyID string) http.Header {
		tok, _, err := iss.Mint(now, tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: tenant, APIKeyID: keyID, Scopes: tenants.AllScopes()})
		require.NoError(t, err)
		return http.Header{"Authorization": []string{"Bearer " + tok}}
	}
	ctx := context.Background()
	const proc = sluicev1connect.RecordServiceProduceProcedure
	revokedKey, suspendedTenant, expiring := mint("t1", "aaaaaaaaaaaaaaaa"), mint("t2", "bbbbbbbbbbbbbbbb"), mint("t3", "cccccccccccccccc")
	var exp time.Time
	for _, h := range []http.Header{revokedKey, suspendedTenant, expiring} {
		for range 2 {
			p, err := a.Authenticate(ctx, proc, h)
			require.NoError(t, err)
			exp = p.ExpiresAt
		}
	}
	require.Equal(t, 3, v.CachedTokens(), "each token is verified once and remembered")

	a.revoked.add("aaaaaaaaaaaaaaaa", now.Add(time.Hour))
	_, err = a.Authenticate(ctx, proc, revokedKey)
	require.ErrorIs(t, err, tenants.ErrInvalidToken)
	require.ErrorContains(t, err, "revoked")

	a.revoked.setSuspended([]string{"t2"})
	_, err = a.Authenticate(ctx, proc, suspendedTenant)
	require.ErrorIs(t, err, tenants.ErrPermissionDenied)
	require.ErrorContains(t, err, "tenant is suspended")

	_, err = a.Authenticate(ctx, proc, expiring)
	require.NoError(t, err)
	later := exp.Add(tenants.MaxLeeway + time.Second)
	clock.Store(&later)
	_, err = a.Authenticate(ctx, proc, expiring)
	require.ErrorIs(t, err, tenants.ErrInvalidToken)
	require.ErrorContains(t, err, "token expired")
}

// TestBrokerTxnOffsetsNeedProduceAndConsume: offsets committed inside a
// transaction need both scopes, as Kafka's TxnOffsetCommit needs Write on
// the transactional id and Read on the group. A produce-only key is
// refused with PermissionDenied at once, wherever the partitions' leaders
// are (it used to pass here, then fail Unavailable — "retry" — when the
// high-watermark check asked another broker with its token); so is an
// AddPartitionsToTransaction naming groups.
func TestBrokerTxnOffsetsNeedProduceAndConsume(t *testing.T) {
	t.Parallel()
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(t, err)
	iss.SetKeys([]tenants.SigningKey{k})
	a := &authenticator{
		verifier:    tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice"}, iss.KeySource()),
		revoked:     newRevocations(),
		brokerToken: "broker-token-0123456789",
	}
	a.revoked.loaded.Store(true)
	token := func(scopes ...string) http.Header {
		tok, _, err := iss.Mint(time.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: scopes})
		require.NoError(t, err)
		return http.Header{"Authorization": []string{"Bearer " + tok}}
	}
	ctx := context.Background()
	proc := sluicev1connect.GroupServiceTxnCommitOffsetsProcedure
	for _, scopes := range [][]string{{tenants.ScopeProduce}, {tenants.ScopeConsume}} {
		_, err := a.Authenticate(ctx, proc, token(scopes...))
		require.ErrorIs(t, err, tenants.ErrPermissionDenied, "scopes %v", scopes)
	}
	_, err = a.Authenticate(ctx, proc, token(tenants.ScopeProduce, tenants.ScopeConsume))
	require.NoError(t, err)
	_, err = a.Authenticate(ctx, sluicev1connect.TransactionServiceAddPartitionsToTransactionProcedure, token(tenants.ScopeProduce))
	require.NoError(t, err, "adding partitions needs produce only")

	// Groups in AddPartitionsToTransaction: refused before the call looks
	// for the transaction coordinator.
	s := connectapi.NewTransactions(txns.New(txns.Config{}, txns.Deps{}), connectapi.TransactionsDeps{})
	pctx := tenants.WithPrincipal(ctx, tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", Scopes: []string{tenants.ScopeProduce}})
	_, err = s.AddPartitionsToTransaction(pctx, connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{TransactionalId: "tx", Groups: []string{"g"}}))
	err = toConnect(err) // as the handlers' interceptor maps it
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, `needs the "consume" scope`)
}
