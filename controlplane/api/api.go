// Package api implements the control plane's Connect services: signup,
// API keys, tokens, topics, operator actions and the brokers' internal
// service (registration, heartbeats, the revocation feed, the assignment
// stream and leader-driven ISR changes, see assignment.go; remote-segment
// metadata for tiered storage, see remote.go; the quota exchange and usage
// reports, see usage.go), tenants' lag alerts, alert policy and webhooks
// (AlertService, alerts.go), and tenants' usage and invoices and the
// operators' plan prices (BillingService, billing.go). Of the brokers'
// services it serves RecordService.GetMetadata only; every other
// procedure of RecordService and GroupService answers Unimplemented with
// a pointer to the brokers (brokeronly.go). It calls the brokers for one
// thing: OperatorService.ListTransactions asks each for the transactions
// its coordinators hold (ReplicaService.ListAllTransactions, with the
// broker credential; operator_txn.go).
//
// Every request passes, in order: the server's gate (internal/httpgate,
// wrapped around each handler by Register), which authenticates it from its
// headers with this package's rules before its body is read (a procedure
// without a rule goes on bodiless, to be answered unimplemented or refused);
// the metrics interceptor; the auth interceptor (tenants.NewAuthInterceptor,
// which takes the gate's principal, or authenticates a call that came
// another way); and the error interceptor, which
// maps domain errors to Connect codes once (toConnectError). Handlers read
// the caller's tenant only from the context, never from the request, and
// validate every field before touching the store. The public Signup and
// CreateToken are rate-limited per client address (abuse.go,
// controlplane/clientlimit).
package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/alerting"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
)

// Config holds the API's settings.
type Config struct {
	// TokenTTL is the lifetime of tenant tokens; the revocation feed need
	// not go further back than that.
	TokenTTL time.Duration
	// OperatorToken authenticates OperatorService calls; empty disables them.
	OperatorToken string
	// BrokerToken authenticates BrokerService calls; empty disables them.
	BrokerToken string
	// BrokerLease is how long a broker stays live without a heartbeat.
	BrokerLease time.Duration
	// DefaultReplicationFactor applies when CreateTopic leaves it at 0.
	DefaultReplicationFactor int32
	// OffsetsTopicPartitions and OffsetsTopicReplicationFactor shape the
	// internal offsets topic (consumer groups' coordinators and commits).
	OffsetsTopicPartitions        int32
	OffsetsTopicReplicationFactor int32
	// TransactionStateTopicPartitions and
	// TransactionStateTopicReplicationFactor shape the internal
	// transaction-state topic (transaction coordinators' state).
	TransactionStateTopicPartitions        int32
	TransactionStateTopicReplicationFactor int32
	// MaxRequestBytes caps every request message.
	MaxRequestBytes int
	// WatchInterval is how often WatchAssignments streams look for changes
	// (DefaultWatchInterval when 0).
	WatchInterval time.Duration
	// DefaultExpiryRiskThreshold is the expiry-risk threshold of tenants
	// that have not set theirs (store.DefaultExpiryRiskThreshold when 0);
	// the alert evaluator's default must be the same.
	DefaultExpiryRiskThreshold time.Duration
	// ClientLimits rate-limit Signup and bad-key CreateToken calls per
	// client address; zero Limits are off (Validate the config first).
	ClientLimits clientlimit.Config
}

// Deps are the API's collaborators.
type Deps struct {
	Store    store.Store
	Issuer   *tenants.Issuer
	Verifier *tenants.Verifier
	Logger   *slog.Logger
	// Interceptors run outside the auth interceptor (e.g. metrics).
	Interceptors []connect.Interceptor
	// Webhooks sends webhook tests, under the address policy webhook URLs
	// are checked against (default: alerting.NewSender(alerting.Guard{},
	// 10 s, Now), which refuses loopback).
	Webhooks *alerting.Sender
	// BrokerHTTP reaches the brokers for the operator's ListTransactions
	// (default: Cluster.HTTPClient(), h2c or TLS by the brokers' addresses).
	BrokerHTTP *http.Client
	// Cluster is the TLS side of the calls between the cluster's servers
	// (nil: none). With mutual TLS (tlsfiles.Source.Mutual), BrokerService
	// calls must present a broker's certificate from its CA, naming the
	// broker the call is from, besides the broker token.
	Cluster *tlsfiles.Source
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// API serves the control plane's Connect services.
type API struct {
	cfg    Config
	store  store.Store
	issuer *tenants.Issuer
	logger *slog.Logger
	now    func() time.Time
	auth   *authenticator
	extra  []connect.Interceptor
	// webhooks sends webhook tests and holds the webhook address policy.
	webhooks *alerting.Sender
	// brokerHTTP reaches the brokers (operator_txn.go).
	brokerHTTP *http.Client

	closing   chan struct{} // closed by CloseStreams
	closeOnce sync.Once

	// Per-client-address limits of the public procedures (abuse.go).
	clients       *clientlimit.Resolver
	signups       *clientlimit.Limiter
	tokenFailures *keyChecks

	// Quotas and metering (usage.go): tenants' limits cached for
	// ExchangeQuotas, and the metering metrics.
	limits limitCache
	cold   coldCache
	usage  *usageMetrics
}

// New returns the API. It does not start anything.
func New(cfg Config, deps Deps) *API {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = 1 << 20
	}
	if cfg.BrokerLease <= 0 {
		cfg.BrokerLease = 10 * time.Second
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = tenants.DefaultTokenTTL
	}
	if cfg.DefaultReplicationFactor <= 0 {
		cfg.DefaultReplicationFactor = 3
	}
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = DefaultWatchInterval
	}
	if cfg.DefaultExpiryRiskThreshold <= 0 {
		cfg.DefaultExpiryRiskThreshold = store.DefaultExpiryRiskThreshold
	}
	if deps.BrokerHTTP == nil {
		deps.BrokerHTTP = deps.Cluster.HTTPClient()
	}
	if deps.Webhooks == nil {
		deps.Webhooks = alerting.NewSender(alerting.Guard{}, 10*time.Second, deps.Now)
	}
	trusted, _ := clientlimit.ParsePrefixes(cfg.ClientLimits.TrustedProxies) // checked by the config's Validate
	return &API{
		clients:       clientlimit.NewResolver(trusted),
		signups:       clientlimit.NewLimiter(cfg.ClientLimits.Signup, cfg.ClientLimits.MaxAddresses),
		tokenFailures: newKeyChecks(clientlimit.NewLimiter(cfg.ClientLimits.TokenFailures, cfg.ClientLimits.MaxAddresses), deps.Now),
		cfg:           cfg,
		store:         deps.Store,
		issuer:        deps.Issuer,
		logger:        deps.Logger,
		now:           deps.Now,
		extra:         deps.Interceptors,
		webhooks:      deps.Webhooks,
		brokerHTTP:    deps.BrokerHTTP,
		closing:       make(chan struct{}),
		usage:         newUsageMetrics(deps.Now),
		auth: &authenticator{
			logger:        deps.Logger,
			store:         deps.Store,
			verifier:      deps.Verifier,
			operatorToken: cfg.OperatorToken,
			brokerToken:   cfg.BrokerToken,
			cluster:       mutual(deps.Cluster),
		},
	}
}

// CloseStreams ends every open and future WatchAssignments stream with
// Unavailable, so that a graceful HTTP shutdown need not wait for them (call
// it when shutdown begins). Idempotent.
func (a *API) CloseStreams() { a.closeOnce.Do(func() { close(a.closing) }) }

// ServiceNames lists the fully qualified names of the services Register
// mounts and serves procedures of (for reflection, health and metrics):
// RecordService for GetMetadata, and not GroupService, which is mounted
// only to point its callers at the brokers (servedByBrokers).
func ServiceNames() []string {
	return []string{
		sluicev1connect.TenantServiceName,
		sluicev1connect.AuthServiceName,
		sluicev1connect.APIKeyServiceName,
		sluicev1connect.TopicServiceName,
		sluicev1connect.OperatorServiceName,
		sluicev1connect.BrokerServiceName,
		sluicev1connect.AlertServiceName,
		sluicev1connect.BillingServiceName,
		sluicev1connect.RecordServiceName,
	}
}

// HandlerOptions returns the options every handler is mounted with:
// interceptors and a request size cap.
func (a *API) HandlerOptions() []connect.HandlerOption {
	ics := append([]connect.Interceptor{}, a.extra...)
	ics = append(ics, tenants.NewAuthInterceptor(a.auth), errorInterceptor{a.logger})
	return []connect.HandlerOption{
		connect.WithInterceptors(ics...),
		connect.WithReadMaxBytes(a.cfg.MaxRequestBytes),
		connect.WithRecover(a.recoverPanic),
	}
}

// recoverPanic turns a handler panic into a logged Internal error instead
// of a dropped connection.
func (a *API) recoverPanic(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
	a.logger.ErrorContext(ctx, "handler panic", "procedure", spec.Procedure, "panic", p, "stack", string(debug.Stack()))
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// Register mounts every service on mux, each through wrap (the server's
// gate, internal/httpgate; nil mounts them as they are).
func (a *API) Register(mux *http.ServeMux, wrap func(string, http.Handler) (string, http.Handler)) {
	if wrap == nil {
		wrap = func(path string, h http.Handler) (string, http.Handler) { return path, h }
	}
	opts := a.HandlerOptions()
	mux.Handle(wrap(sluicev1connect.NewTenantServiceHandler(&tenantService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewAuthServiceHandler(&authService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewAPIKeyServiceHandler(&apiKeyService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewTopicServiceHandler(&topicService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewOperatorServiceHandler(&operatorService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewBrokerServiceHandler(&brokerService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewAlertServiceHandler(&alertService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewBillingServiceHandler(&billingService{a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewRecordServiceHandler(&metadataService{API: a}, opts...)))
	mux.Handle(wrap(sluicev1connect.NewGroupServiceHandler(brokerGroups{}, opts...)))
}

// Authenticator decides every call's caller from its headers (the rules
// of auth.go), for a gate in front of the handlers.
func (a *API) Authenticator() tenants.Authenticator { return a.auth }

// limitsOf returns a tenant's effective limits: plan defaults with its
// overrides applied.
func limitsOf(t store.Tenant) (tenants.Limits, tenants.Overrides, error) {
	l, err := tenants.PlanLimits(t.Plan)
	if err != nil {
		return tenants.Limits{}, tenants.Overrides{}, err
	}
	o, err := decodeOverrides(t.Overrides)
	if err != nil {
		return tenants.Limits{}, tenants.Overrides{}, err
	}
	return l.With(o), o, nil
}

func (a *API) tenantOf(ctx context.Context) (tenants.Principal, store.Tenant, error) {
	p, err := principal(ctx)
	if err != nil {
		return p, store.Tenant{}, err
	}
	t, err := a.store.GetTenant(ctx, p.TenantID)
	return p, t, err
}

// mutual is cluster when it asks for mutual TLS inside the cluster, else nil.
func mutual(cluster *tlsfiles.Source) *tlsfiles.Source {
	if cluster.Mutual() {
		return cluster
	}
	return nil
}
