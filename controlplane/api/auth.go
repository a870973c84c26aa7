package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// access is who may call a procedure.
type access int

const (
	accessDenied   access = iota // unknown procedures: nobody
	accessPublic                 // no credentials
	accessTenant                 // a tenant JWT; scope "" means any scope
	accessOperator               // the operator credential
	accessBroker                 // the broker credential
)

type rule struct {
	access access
	scope  string
}

// rules lists every procedure the control plane serves. A procedure missing
// here is refused (those of the brokers' services with a pointer to the
// brokers, servedByBrokers): new RPCs must be given a rule to be reachable.
var rules = map[string]rule{
	sluicev1connect.TenantServiceSignupProcedure:    {access: accessPublic},
	sluicev1connect.TenantServiceGetTenantProcedure: {access: accessTenant},
	sluicev1connect.AuthServiceCreateTokenProcedure: {access: accessPublic},

	sluicev1connect.APIKeyServiceCreateAPIKeyProcedure: {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.APIKeyServiceListAPIKeysProcedure:  {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.APIKeyServiceRevokeAPIKeyProcedure: {access: accessTenant, scope: tenants.ScopeAdmin},

	sluicev1connect.TopicServiceCreateTopicProcedure:       {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.TopicServiceListTopicsProcedure:        {access: accessTenant},
	sluicev1connect.TopicServiceDescribeTopicProcedure:     {access: accessTenant},
	sluicev1connect.TopicServiceUpdateTopicConfigProcedure: {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.TopicServiceDeleteTopicProcedure:       {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.TopicServiceCreatePartitionsProcedure:  {access: accessTenant, scope: tenants.ScopeAdmin},

	// Reading alerts, the policy, webhooks and their deliveries needs any
	// tenant token; changing webhooks and the policy, and sending a test
	// (a request to an outside endpoint), needs admin.
	sluicev1connect.AlertServiceListAlertsProcedure:            {access: accessTenant},
	sluicev1connect.AlertServiceGetAlertProcedure:              {access: accessTenant},
	sluicev1connect.AlertServiceGetAlertPolicyProcedure:        {access: accessTenant},
	sluicev1connect.AlertServiceUpdateAlertPolicyProcedure:     {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.AlertServiceCreateWebhookProcedure:         {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.AlertServiceListWebhooksProcedure:          {access: accessTenant},
	sluicev1connect.AlertServiceDeleteWebhookProcedure:         {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.AlertServiceTestWebhookProcedure:           {access: accessTenant, scope: tenants.ScopeAdmin},
	sluicev1connect.AlertServiceListWebhookDeliveriesProcedure: {access: accessTenant},

	// Only GetMetadata: it points clients at the brokers, which serve the rest.
	sluicev1connect.RecordServiceGetMetadataProcedure: {access: accessTenant},

	sluicev1connect.OperatorServiceListTenantsProcedure:  {access: accessOperator},
	sluicev1connect.OperatorServiceUpdateTenantProcedure: {access: accessOperator},
	sluicev1connect.OperatorServiceListBrokersProcedure:  {access: accessOperator},
	// Asks every broker with the broker credential (operator_txn.go).
	sluicev1connect.OperatorServiceListTransactionsProcedure: {access: accessOperator},
	sluicev1connect.OperatorServiceGetPlanPricesProcedure:    {access: accessOperator},
	sluicev1connect.OperatorServiceSetPlanPricesProcedure:    {access: accessOperator},

	sluicev1connect.BrokerServiceRegisterBrokerProcedure:      {access: accessBroker},
	sluicev1connect.BrokerServiceHeartbeatBrokerProcedure:     {access: accessBroker},
	sluicev1connect.BrokerServiceListRevokedAPIKeysProcedure:  {access: accessBroker},
	sluicev1connect.BrokerServiceWatchAssignmentsProcedure:    {access: accessBroker},
	sluicev1connect.BrokerServiceAlterPartitionProcedure:      {access: accessBroker},
	sluicev1connect.BrokerServiceAlterPartitionsProcedure:     {access: accessBroker},
	sluicev1connect.BrokerServiceAllocateProducerIdsProcedure: {access: accessBroker},
	sluicev1connect.BrokerServiceAddRemoteSegmentProcedure:    {access: accessBroker},
	sluicev1connect.BrokerServiceUpdateRemoteSegmentProcedure: {access: accessBroker},
	sluicev1connect.BrokerServiceListRemoteSegmentsProcedure:  {access: accessBroker},
	sluicev1connect.BrokerServiceExchangeQuotasProcedure:      {access: accessBroker},
	sluicev1connect.BrokerServiceReserveObjectsProcedure:      {access: accessBroker},
	sluicev1connect.BrokerServiceReportUsageProcedure:         {access: accessBroker},

	sluicev1connect.BillingServiceGetUsageProcedure:     {access: accessTenant},
	sluicev1connect.BillingServiceListInvoicesProcedure: {access: accessTenant},
	sluicev1connect.BillingServiceGetInvoiceProcedure:   {access: accessTenant},
}

// authenticator decides who is calling. Tenant tokens are verified offline
// (signature, iss, aud, exp), then — unlike on brokers — the API key they
// were minted from is checked against the store on every request, so a
// revoked key stops working at once, and a suspended tenant is refused.
type authenticator struct {
	logger        *slog.Logger
	store         store.Store
	verifier      *tenants.Verifier
	operatorToken string
	brokerToken   string
}

func (a *authenticator) Authenticate(ctx context.Context, procedure string, h http.Header) (tenants.Principal, error) {
	r, ok := rules[procedure]
	if !ok {
		if tenants.IsInfrastructureProcedure(procedure) {
			return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
		}
		if err := servedByBrokers(procedure); err != nil {
			return tenants.Principal{}, err
		}
		return tenants.Principal{}, tenants.ErrUnknownProcedure
	}
	switch r.access {
	case accessPublic:
		return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
	case accessOperator:
		if err := checkSharedSecret(h, a.operatorToken, "operator"); err != nil {
			return tenants.Principal{}, err
		}
		return tenants.Principal{Kind: tenants.PrincipalOperator}, nil
	case accessBroker:
		if err := checkSharedSecret(h, a.brokerToken, "broker"); err != nil {
			return tenants.Principal{}, err
		}
		return tenants.Principal{Kind: tenants.PrincipalBroker}, nil
	case accessTenant:
		return a.tenant(ctx, h, r.scope)
	}
	return tenants.Principal{}, fmt.Errorf("%w: procedure not allowed", tenants.ErrPermissionDenied)
}

func (a *authenticator) tenant(ctx context.Context, h http.Header, scope string) (tenants.Principal, error) {
	tok, err := tenants.BearerToken(h)
	if err != nil {
		return tenants.Principal{}, err
	}
	if strings.HasPrefix(tok, tenants.APIKeyPrefix) {
		return tenants.Principal{}, fmt.Errorf("%w: an API key is not a token; exchange it for one with AuthService.CreateToken", tenants.ErrInvalidToken)
	}
	p, err := a.verifier.Verify(ctx, tok)
	if err != nil {
		return tenants.Principal{}, err
	}
	key, err := a.store.GetAPIKey(ctx, p.APIKeyID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tenants.Principal{}, fmt.Errorf("%w: the token's API key no longer exists", tenants.ErrInvalidToken)
	case err != nil:
		a.logger.ErrorContext(ctx, "authenticate: look up API key", "key", p.APIKeyID, "err", err)
		return tenants.Principal{}, fmt.Errorf("look up API key: %w", err)
	case key.TenantID != p.TenantID:
		return tenants.Principal{}, fmt.Errorf("%w: token does not match its API key", tenants.ErrInvalidToken)
	case key.Revoked():
		return tenants.Principal{}, fmt.Errorf("%w: the token's API key was revoked", tenants.ErrInvalidToken)
	}
	t, err := a.store.GetTenant(ctx, p.TenantID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tenants.Principal{}, fmt.Errorf("%w: tenant no longer exists", tenants.ErrInvalidToken)
	case err != nil:
		a.logger.ErrorContext(ctx, "authenticate: look up tenant", "tenant", p.TenantID, "err", err)
		return tenants.Principal{}, fmt.Errorf("look up tenant: %w", err)
	case t.Status != store.TenantActive:
		return tenants.Principal{}, fmt.Errorf("%w: tenant is %s", tenants.ErrPermissionDenied, t.Status)
	}
	if scope != "" && !p.Has(scope) {
		return tenants.Principal{}, fmt.Errorf("%w: this call needs the %q scope", tenants.ErrPermissionDenied, scope)
	}
	return p, nil
}

// checkSharedSecret compares the bearer token with a configured secret in
// constant time. An unset secret disables that kind of caller entirely.
func checkSharedSecret(h http.Header, secret, who string) error {
	if secret == "" {
		return fmt.Errorf("%w: %s API disabled (no %s token configured)", tenants.ErrPermissionDenied, who, who)
	}
	tok, err := tenants.BearerToken(h)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(secret)) != 1 {
		return fmt.Errorf("%w: invalid %s credential", tenants.ErrInvalidToken, who)
	}
	return nil
}

// principal returns the authenticated tenant caller placed in ctx by the
// auth interceptor. Handlers read the tenant only from here.
func principal(ctx context.Context) (tenants.Principal, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.Kind != tenants.PrincipalTenant || p.TenantID == "" {
		return tenants.Principal{}, errors.New("no tenant principal in context")
	}
	return p, nil
}
