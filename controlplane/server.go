// Package controlplane wires the control plane: the metadata store, JWT
// signing keys, the Connect API, JWKS and health endpoints, the operator
// listener (metrics and health, internal/opshttp), and the candidate
// controller (controlplane/controller).
//
// Goroutines: Run owns the HTTP servers, the signing-key sync loop, the
// usage-metering loop (controlplane/metering) and the controller loop; all
// stop when its context is cancelled. On cancellation
// the WatchAssignments streams end at once (Unavailable), gRPC health
// answers NOT_SERVING and its Watch streams end once told, the controller
// stops renewing its lease (another replica takes over when it expires), and
// in-flight requests drain for up to Config.ShutdownTimeout. Run returns only
// after the controller and metering loops have returned. The Server holds no other
// background work.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicemq/sluice/billing"
	"github.com/sluicemq/sluice/controlplane/alerting"
	"github.com/sluicemq/sluice/controlplane/api"
	"github.com/sluicemq/sluice/controlplane/controller"
	"github.com/sluicemq/sluice/controlplane/metering"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/internal/healthwatch"
	"github.com/sluicemq/sluice/internal/httpgate"
	"github.com/sluicemq/sluice/internal/opshttp"
	"github.com/sluicemq/sluice/internal/rpcmetrics"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
)

// JWKSPath is where the control plane publishes its token verification keys.
const JWKSPath = "/.well-known/jwks.json"

// keySyncInterval is how often each replica reloads signing keys from the
// store (and rotates when due).
const keySyncInterval = 30 * time.Second

// Deps are the server's collaborators. Store, when set, is used instead of
// opening Config.DatabaseURL (and is not closed by the server).
type Deps struct {
	Logger *slog.Logger
	Store  store.Store
	// Clock is the control plane's time: tokens, leases, the controller,
	// the meters and the lag alerts read it, and their loops tick on it
	// (clock.Real when nil; tests move a clock.Fake).
	Clock clock.Clock
	// Interceptors run on every call the API port serves, outside the
	// metrics and auth interceptors (internal/localcluster's faults).
	Interceptors []connect.Interceptor
	// External, when set, is the external listener (bound at
	// Config.ExternalListenAddr by the caller), which Run serves too: the
	// same API, but GetMetadata names the brokers' external addresses and
	// the BrokerService is not served.
	External net.Listener
}

// Server is a control-plane replica.
type Server struct {
	cfg       Config
	logger    *slog.Logger
	store     store.Store
	ownsStore bool
	issuer    *tenants.Issuer
	keys      *keyring
	registry  *prometheus.Registry
	gate      *httpgate.Gate    // in front of the Connect services
	alerter   *alerting.Alerter // nil when lag alerts are off
	handler   http.Handler      // the API port
	tls       *tlsfiles.Server  // the listeners' and the calls to brokers' TLS
	external  net.Listener      // the external listener, or nil
	ops       http.Handler      // the operator listener
	api       *api.API
	ctl       *controller.Controller
	meter     *metering.Meter
	now       func() time.Time
	// health answers gRPC health checks: SERVING until the API server
	// begins to drain (startDrain), which ends drainCtx.
	health   *grpchealth.StaticChecker
	drainCtx context.Context
	drain    context.CancelFunc
}

// New opens the store (applying migrations), loads or creates the JWT
// signing key, and builds the HTTP handler. It starts nothing.
func New(ctx context.Context, cfg Config, deps Deps) (*Server, error) {
	if cfg.Controller == (controller.Config{}) {
		cfg.Controller = controller.DefaultConfig()
	}
	if deps.Store != nil && cfg.DatabaseURL == "" {
		cfg.DatabaseURL = "sqlite:(provided store)" // only to pass Validate
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	deps.Clock = clock.Or(deps.Clock)
	now := deps.Clock.Now
	srvTLS, err := cfg.TLS.Load(deps.Logger)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, logger: deps.Logger, store: deps.Store, now: now, tls: srvTLS, external: deps.External}
	if s.store == nil {
		st, err := OpenStore(ctx, cfg.DatabaseURL, deps.Logger)
		if err != nil {
			return nil, err
		}
		s.store, s.ownsStore = st, true
	}
	s.issuer = tenants.NewIssuer(tenants.IssuerConfig{Issuer: cfg.Issuer, Audience: cfg.Audience, TokenTTL: cfg.TokenTTL})
	s.keys = &keyring{
		store:      s.store,
		issuer:     s.issuer,
		rotation:   cfg.KeyRotation,
		prepublish: 2 * keySyncInterval,
		// Tokens signed just before retirement live TokenTTL more.
		keep:   cfg.TokenTTL + tenants.MaxLeeway + time.Minute,
		logger: deps.Logger,
		now:    now,
	}
	if err := s.keys.sync(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("load signing keys: %w", err)
	}
	verifier := tenants.NewVerifier(tenants.VerifierConfig{Issuer: cfg.Issuer, Audience: cfg.Audience, Now: now}, s.keys)

	s.registry = prometheus.NewRegistry()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c := storeCollector(s.store); c != nil {
		s.registry.MustRegister(c)
	}
	metrics := rpcmetrics.New(s.registry, "sluice", "controlplane", api.ServiceNames())

	// One sender for the delivery loop and the API's webhook tests, with
	// one address policy.
	sender := alerting.NewSender(alerting.Guard{AllowInsecureLoopback: cfg.WebhookAllowInsecureLoopback}, 10*time.Second, now)
	a := api.New(api.Config{
		TokenTTL:                               cfg.TokenTTL,
		OperatorToken:                          cfg.OperatorToken,
		BrokerToken:                            cfg.BrokerToken,
		BrokerLease:                            cfg.BrokerLease,
		DefaultReplicationFactor:               int32(cfg.DefaultReplicationFactor),
		OffsetsTopicPartitions:                 int32(cfg.OffsetsTopicPartitions),
		OffsetsTopicReplicationFactor:          int32(cfg.OffsetsTopicReplicationFactor),
		TransactionStateTopicPartitions:        int32(cfg.TransactionStateTopicPartitions),
		TransactionStateTopicReplicationFactor: int32(cfg.TransactionStateTopicReplicationFactor),
		MaxRequestBytes:                        cfg.MaxRequestBytes,
		DefaultExpiryRiskThreshold:             cfg.LagAlertPolicy.RiskThreshold,
		ClientLimits:                           cfg.ClientLimits,
	}, api.Deps{
		Cluster:      srvTLS.ClusterSource(),
		Webhooks:     sender,
		Store:        s.store,
		Issuer:       s.issuer,
		Verifier:     verifier,
		Logger:       deps.Logger,
		Interceptors: append(slices.Clone(deps.Interceptors), metrics),
		Now:          now,
	})
	s.api = a
	s.registry.MustRegister(a.UsageCollector())
	billingMetrics := billing.NewMetrics()
	job := billing.NewJob(s.store, billing.JobConfig{Logger: deps.Logger, Metrics: billingMetrics})
	s.meter = metering.New(metering.Config{Interval: cfg.MeteringInterval, BillingInterval: cfg.BillingInterval}, metering.Deps{
		Store: s.store, Logger: deps.Logger, Clock: deps.Clock,
		Billing: func(ctx context.Context) error { _, err := job.RunOnce(ctx, now()); return err },
	})
	s.registry.MustRegister(s.meter.Collector(), billingMetrics)
	ctlCfg := cfg.Controller
	ctlCfg.StartupGrace = cfg.BrokerLease
	ctl, err := controller.New(ctlCfg, controller.Deps{Store: s.store, Logger: deps.Logger, Registerer: s.registry, Clock: deps.Clock})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.ctl = ctl
	// Every call is authenticated, and its memory reserved, from its
	// headers before its body is read (internal/httpgate).
	s.gate = httpgate.New(cfg.RequestMemory.Config(int64(cfg.MaxRequestBytes)), httpgate.Deps{
		Auth: a.Authenticator(), Registerer: s.registry, Namespace: "sluice", Subsystem: "controlplane", Logger: deps.Logger,
	})
	mux := http.NewServeMux()
	a.Register(mux, s.gate.Wrap)
	services := api.ServiceNames()
	// Health and reflection go through the same interceptors (public in
	// the auth rules), size cap and metrics as the API. Reflection lists
	// every service answered here, health and reflection included.
	opts := a.HandlerOptions()
	s.health = grpchealth.NewStaticChecker(services...)
	s.drainCtx, s.drain = context.WithCancel(context.Background())
	mux.Handle(s.gate.Wrap(grpchealth.NewHandler(s.health, append(slices.Clone(opts),
		connect.WithInterceptors(healthwatch.EndOnDrain(func() context.Context { return s.drainCtx })))...)))
	// Reflection streams from anonymous clients: every message it reads
	// is held to an anonymous call's size (the gate charges only the
	// first).
	reflectOpts := append(slices.Clone(opts), connect.WithReadMaxBytes(httpgate.PublicMaxRequestBytes))
	reflector := grpcreflect.NewStaticReflector(slices.Concat(services,
		[]string{grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName})...)
	mux.Handle(s.gate.WrapClientStreams(grpcreflect.NewHandlerV1(reflector, reflectOpts...)))
	mux.Handle(s.gate.WrapClientStreams(grpcreflect.NewHandlerV1Alpha(reflector, reflectOpts...)))
	mux.HandleFunc("GET "+JWKSPath, s.serveJWKS)
	if cfg.LagSampleInterval > 0 {
		s.alerter = alerting.New(s.store, alerting.Config{
			SampleInterval: cfg.LagSampleInterval, Window: cfg.LagWindow, Policy: cfg.LagAlertPolicy, BrokerToken: cfg.BrokerToken,
			HTTP: srvTLS.ClusterSource().HTTPClient(), Sender: sender, Logger: s.logger, Clock: deps.Clock,
		})
		s.registry.MustRegister(s.alerter.Collector())
	}
	// No /metrics here: its labels name tenants, topics and groups, and
	// tenants reach this port. It is on the operator listener only.
	mux.HandleFunc("GET /healthz", opshttp.Healthz)
	mux.HandleFunc("GET /readyz", s.serveReady)
	// The caller's TLS certificate, for the authenticator (mutual TLS
	// inside the cluster).
	s.handler = tlsfiles.Handler(mux)
	s.ops = opshttp.Handler(s.registry, s.serveReady)
	return s, nil
}

// OpenStore opens the store a database URL names: postgres:// or
// postgresql:// (pgx) or sqlite:PATH.
func OpenStore(ctx context.Context, url string, logger *slog.Logger) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		st, err := postgres.Open(ctx, url, logger)
		if err != nil {
			return nil, fmt.Errorf("open postgres store %s: %w", redact(url), err)
		}
		return st, nil
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(url, "sqlite:")
		st, err := sqlite.Open(ctx, path, logger)
		if err != nil {
			return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
		}
		return st, nil
	}
	return nil, fmt.Errorf("unsupported database URL %q: use postgres://… or sqlite:PATH", redact(url))
}

// Handler serves the API port: the Connect API, gRPC health and
// reflection, JWKS, /healthz and /readyz. It serves no metrics.
func (s *Server) Handler() http.Handler { return s.handler }

// OperatorHandler serves the operator listener: /metrics, /healthz and
// /readyz (see internal/opshttp).
func (s *Server) OperatorHandler() http.Handler { return s.ops }

// Registry is the server's private Prometheus registry.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Store is the server's metadata store.
func (s *Server) Store() store.Store { return s.store }

func (s *Server) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	b, err := s.issuer.JWKS(s.now())
	if err != nil {
		s.logger.Error("render JWKS", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=60")
	_, _ = w.Write(b)
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.store.ListSigningKeys(ctx); err != nil {
		s.logger.Warn("readiness: store unreachable", "err", err)
		http.Error(w, "store unreachable", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// NewHTTPServer returns an http.Server for h speaking HTTP/1.1 and h2c
// (HTTP/2 without TLS, as gRPC clients use on private networks), with
// bounded headers and concurrent streams. connContext (optional) is its
// ConnContext: the gate's, for its per-connection memory pools.
func NewHTTPServer(h http.Handler, logger *slog.Logger, connContext func(context.Context, net.Conn) context.Context) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 250, MaxDecoderHeaderTableSize: 16 << 10},
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ConnContext:       connContext,
	}
}

// Run serves the API on ln and, when ops is not nil, the operator
// listener (OperatorHandler) on ops, until ctx is cancelled, syncing
// signing keys in the background; then it drains both for up to
// ShutdownTimeout.
func (s *Server) Run(ctx context.Context, ln, ops net.Listener) error {
	ln, err := s.tls.APIListener(ln, s.logger)
	if err != nil {
		return err
	}
	if ops != nil {
		if ops, err = s.tls.OpsListener(ops, s.logger); err != nil {
			return err
		}
	}
	var xln net.Listener
	if s.external != nil {
		if xln, err = s.tls.ExternalListener(s.external, s.logger); err != nil {
			return err
		}
	}
	srv := NewHTTPServer(s.handler, s.logger, s.gate.ConnContext)
	srv.RegisterOnShutdown(s.api.CloseStreams)
	srv.RegisterOnShutdown(s.startDrain)
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	go s.keys.run(loopCtx, keySyncInterval)
	go s.ensureInternalTopic(loopCtx, "offsets", s.api.EnsureOffsetsTopic)
	go s.ensureInternalTopic(loopCtx, "transaction-state", s.api.EnsureTransactionStateTopic)
	if s.alerter != nil {
		go s.alerter.Run(loopCtx)
	}
	meterDone := make(chan struct{})
	go func() {
		defer close(meterDone)
		s.meter.Run(loopCtx)
	}()
	defer func() {
		stopLoop()
		<-meterDone
	}()
	ctlDone := make(chan struct{})
	go func() {
		defer close(ctlDone)
		s.ctl.Run(loopCtx)
	}()
	defer func() {
		stopLoop()
		<-ctlDone
	}()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logAttrs := []any{"addr", ln.Addr().String()}
	// The external listener: the same API but for the BrokerService.
	var extSrv *http.Server
	extErrc := make(chan error, 1)
	if xln != nil {
		extSrv = NewHTTPServer(endpoint.ExternalHandler(s.handler, "/"+sluicev1connect.BrokerServiceName+"/"), s.logger,
			endpoint.ExternalConnContext(s.gate.ConnContext))
		extSrv.RegisterOnShutdown(s.api.CloseStreams)
		go func() { extErrc <- extSrv.Serve(xln) }()
		logAttrs = append(logAttrs, "external_addr", xln.Addr().String())
	}
	var opsSrv *http.Server
	opsErrc := make(chan error, 1)
	if ops != nil {
		opsSrv = opshttp.NewServer(s.ops, s.logger)
		go func() { opsErrc <- opsSrv.Serve(ops) }()
		logAttrs = append(logAttrs, "metrics_addr", ops.Addr().String())
	}
	s.logger.Info("control plane serving", logAttrs...)
	select {
	case err := <-errc:
		if opsSrv != nil {
			_ = opsSrv.Close()
		}
		if extSrv != nil {
			_ = extSrv.Close()
		}
		return fmt.Errorf("serve: %w", err)
	case err := <-opsErrc:
		_ = srv.Close()
		if extSrv != nil {
			_ = extSrv.Close()
		}
		return fmt.Errorf("serve the operator listener: %w", err)
	case err := <-extErrc:
		_ = srv.Close()
		if opsSrv != nil {
			_ = opsSrv.Close()
		}
		return fmt.Errorf("serve the external listener: %w", err)
	case <-ctx.Done():
	}
	timeout := s.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = srv.Shutdown(shutCtx)
	if extSrv != nil {
		if xerr := extSrv.Shutdown(shutCtx); err == nil {
			err = xerr
		}
		<-extErrc
	}
	if opsSrv != nil {
		// Probes and scrapes answer until the API has drained.
		if oerr := opsSrv.Shutdown(shutCtx); err == nil {
			err = oerr
		}
		<-opsErrc
	}
	if errors.Is(<-errc, http.ErrServerClosed) && err == nil {
		return nil
	}
	return err
}

// startDrain runs when the API server begins to drain: gRPC health
// answers NOT_SERVING from then on, and health Watch streams, once told,
// end (healthwatch.EndOnDrain) instead of holding the drain.
func (s *Server) startDrain() {
	s.health.SetStatus("", grpchealth.StatusNotServing)
	for _, svc := range api.ServiceNames() {
		s.health.SetStatus(svc, grpchealth.StatusNotServing)
	}
	s.drain()
}

// ensureInternalTopic creates an internal topic (ensure: the offsets
// topic's or the transaction-state topic's) as soon as enough brokers are
// live, checking every second until it exists.
func (s *Server) ensureInternalTopic(ctx context.Context, name string, ensure func(context.Context) (bool, error)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		ok, err := ensure(ctx)
		if ok {
			return
		}
		if err != nil && ctx.Err() == nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
			s.logger.Warn("create the internal "+name+" topic", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close releases the store if the server opened it.
func (s *Server) Close() error {
	if s.drain != nil {
		s.drain()
	}
	if s.ownsStore && s.store != nil {
		return s.store.Close()
	}
	return nil
}
