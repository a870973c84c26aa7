package broker

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
