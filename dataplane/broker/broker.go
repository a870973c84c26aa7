// Package broker is a Sluice data-plane broker: it registers with the
// control plane and keeps its lease, follows the partition assignments the
// control plane streams to it (watch.go) and hands each view to its
// replica manager (b.replicas, dataplane/replicas: it opens a partition
// replica, dataplane/partition, for each partition placed on it, closes
// those that moved away, deletes deleted topics' data, keeps the HW
// checkpoint), and serves the RecordService (produce,
// fetch, list offsets, metadata: dataplane/records' service behind
// connectapi's adapter, wired in recordsvc.go), the GroupService
// (consumer groups: dataplane/groups behind connectapi.Groups, wired in
// groups.go) and the TransactionService (transactions, coordinated like
// groups on an internal topic: dataplane/txns, through its Connect
// adapter in dataplane/connectapi, wired in txn.go), the internal
// ReplicaService (followers copying a leader's log), with
// gRPC health and reflection for the first two (health.go: SERVING only
// once the broker is ready, as /readyz). Its calls to other brokers go
// through connectapi.Peers (their Connect clients, b.peers), which it
// wires into the services and adapters; it makes none itself.
//
// Goroutines, all owned by Run and stopped when its context ends: the HTTP
// servers (the client port, the operator listener); the lease loop (register, heartbeat, re-register when fenced); the
// assignment watch; the revocation poller; the ISR checker; the group lag
// metrics loop (groupLagLoop: a round of groups.Service.ComputeLag per
// --group-lag-metrics-interval); the coordinators' hosting loop (hostLoop: the group and
// transaction coordinators hosted by the runtime b.rt, whose timers and
// marker writes run in the runtime's goroutines, closed after the loops
// end); the quota exchange (b.quota.Run: dataplane/admission, wired in
// quota.go); the replica manager's HW checkpoint and retention loops, and
// the tiering loop over the replicas (tier.go); the usage report loop
// (meter.go, which reports once more after the client port drained); and,
// owned by the replicas' partition.Host, one fetcher per leader broker
// this broker's follower replicas fetch from. Lock order: the replica
// manager's lock before a replica's lock; Broker.mu (the run context)
// is held around nothing else; no lock is held across network calls.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicemq/sluice/dataplane/access"
	"github.com/sluicemq/sluice/dataplane/admission"
	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/groups"
	"github.com/sluicemq/sluice/dataplane/kafka"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/meter"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/partition/fetcher"
	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/dataplane/replicas"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/dataplane/txns"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/dirlock"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/internal/healthwatch"
	"github.com/sluicemq/sluice/internal/httpgate"
	"github.com/sluicemq/sluice/internal/opshttp"
	"github.com/sluicemq/sluice/internal/rpcmetrics"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tiered"
	"github.com/sluicemq/sluice/tiered/objstore"
)

// Deps are the broker's collaborators.
type Deps struct {
	Logger *slog.Logger
	// TierStore, when set, turns on tiered storage: closed segments of
	// tenant topics are copied to it and read back from it.
	TierStore objstore.Store
	// Interceptors, when set, run on every call of the client port's
	// services, innermost (after authentication, inside the mapping of
	// domain errors to Connect's, so they may return either). A test
	// harness injects faults with them (internal/localcluster).
	Interceptors []connect.Interceptor
	// External, when set, is the external listener (bound at
	// Config.ExternalListenAddr by the caller), which Run serves too.
	External net.Listener
	// Kafka, when set, is the Kafka listener (bound at Config.KafkaAddr
	// by the caller), which Run serves too.
	Kafka net.Listener
}

// Broker is one data-plane broker.
type Broker struct {
	cfg      Config
	logger   *slog.Logger
	flush    log.FlushPolicy
	files    *log.FileCache // every replica log's open segment files
	registry *prometheus.Registry
	metrics  *brokerMetrics
	quota    *admission.Enforcer // quota.go
	groups   *groups.Service     // the consumer groups (groups.go)
	// replicasAPI serves the ReplicaService (other brokers' calls).
	replicasAPI *connectapi.Replicas
	handler     http.Handler      // the client port
	tls         *tlsfiles.Server  // the listeners' and the cluster calls' TLS
	external    net.Listener      // the external listener, or nil
	kafkaLn     net.Listener      // the Kafka listener, or nil
	kafka       *kafka.Server     // serves kafkaLn
	gate        *httpgate.Gate    // in front of handler's Connect services
	ops         http.Handler      // the operator listener
	hc          *http.Client      // h2c to the control plane and other brokers
	peers       *connectapi.Peers // the other brokers' Connect clients
	cp          sluicev1connect.BrokerServiceClient
	jwks        *tenants.JWKSCache
	revoked     *access.Revocations
	dirLock     *dirlock.Lock // on cfg.DataDir, from New until Run returns
	// Tiered storage; both nil when off.
	tierStore objstore.Store
	tier      *tiered.Tier
	// host is what the partition replicas reach the broker through.
	host *partition.Host
	// sessions are the fetch sessions of the followers that fetch from
	// the partitions this broker leads (FetchReplicas).
	sessions *fetchsession.Sessions

	brokerEpoch atomic.Int64
	meta        atomic.Pointer[cluster.View]
	// assigned: the first assignments from the control plane are applied
	// (their replicas opened); part of readiness (notReady).
	assigned atomic.Bool
	health   *connectapi.Health // gRPC health, its Watch streams

	// replicas are the partition replicas this broker hosts.
	replicas *replicas.Manager

	mu      sync.Mutex
	runCtx  context.Context
	stopRun context.CancelCauseFunc
	// rt hosts the group and transaction coordinators, one per partition
	// of the internal topics this broker leads (hostLoop).
	rt *runtime.Runtime
	// txns serves the transactions, txnAPI is its Connect adapter (txn.go).
	txns   *txns.Service
	txnAPI *connectapi.Transactions
	// Usage metering (meter.go): the tenants' egress and request counts,
	// and their reporter.
	usageCounters *meter.Counters
	usage         *meter.Reporter

	// The record path (recordsvc.go): the service and its Connect
	// adapter.
	records    *records.Service
	recordsAPI *connectapi.Records
}

// New builds a broker; Run starts it. New takes an exclusive lock on
// cfg.DataDir (creating it), so a second broker on the same data dir, in
// this process or another, is refused with a *dirlock.HeldError naming the
// holder's pid; Run releases it when it returns (a broker that is never
// run holds it until the process exits).
func New(cfg Config, deps Deps) (_ *Broker, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Before anything touches the data dir (the tier cache under it is
	// emptied below).
	dirLock, err := dirlock.Acquire(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("broker %d: %w", cfg.ID, err)
	}
	defer func() {
		if err != nil {
			_ = dirLock.Release()
		}
	}()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	flush, _ := cfg.FlushPolicy()
	srvTLS, err := cfg.TLS.Load(deps.Logger)
	if err != nil {
		return nil, fmt.Errorf("broker %d: %w", cfg.ID, err)
	}
	hws, err := replicas.ReadHWCheckpoint(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("broker %d: %w", cfg.ID, err)
	}
	b := &Broker{
		cfg:      cfg,
		logger:   deps.Logger.With("broker", cfg.ID),
		flush:    flush,
		files:    log.NewFileCache(cfg.MaxOpenSegmentFiles),
		rt:       runtime.NewRuntime(),
		revoked:  access.NewRevocations(),
		tls:      srvTLS,
		external: deps.External,
		kafkaLn:  deps.Kafka,
		hc:       srvTLS.ClusterSource().HTTPClient(),
		dirLock:  dirLock,

		tierStore: deps.TierStore,
	}
	b.health = &connectapi.Health{NotReady: b.notReady}
	b.meta.Store(cluster.EmptyView())
	b.peers = connectapi.NewPeers(b.hc, cfg.BrokerToken, func(id int32) string { return b.metadata().Brokers[id].Address })
	cpURL := strings.TrimRight(cfg.ControlPlane, "/")
	b.cp = sluicev1connect.NewBrokerServiceClient(b.hc, cpURL, connect.WithInterceptors(tenants.Bearer(cfg.BrokerToken)))
	b.jwks = tenants.NewJWKSCache(cpURL+"/.well-known/jwks.json", b.hc, time.Minute, 5*time.Second)
	verifier := tenants.NewVerifier(tenants.VerifierConfig{Issuer: cfg.Issuer, Audience: cfg.Audience, CacheSize: access.TokenCacheSize}, b.jwks)

	b.registry = prometheus.NewRegistry()
	b.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	b.metrics = newBrokerMetrics(b.registry, b)
	b.quota = b.newEnforcer()
	b.newTxns()
	b.usageCounters = &meter.Counters{}
	b.usage = b.newUsageReporter()
	b.registry.MustRegister(b.usage.Collectors()...)
	b.newRecords()
	if err := b.newTier(); err != nil {
		return nil, err
	}
	b.host = b.replicaHost()
	b.replicas = replicas.New(replicas.Config{DataDir: cfg.DataDir, Host: b.host, HWs: hws})
	b.sessions = partition.NewSessions(b.partition, fetchsession.Config{
		Metrics:     &fetchsession.Metrics{Requests: b.metrics.fetchSessionRequests},
		ErrorAnswer: connectapi.FetchErrorAnswer,
	})
	b.groups = b.newGroups()
	rpcm := rpcmetrics.New(b.registry, "sluice", "broker", append(slices.Clone(connectapi.ClientServices), sluicev1connect.ReplicaServiceName))
	brokerAuth := access.NewAuthenticator(verifier, b.revoked, cfg.BrokerToken)
	brokerAuth.RequirePeers(srvTLS.ClusterSource())
	auth := connectapi.Authenticator{Authenticator: brokerAuth}
	opts := []connect.HandlerOption{
		// Requests are billed and charged to the tenants' requests/s in
		// the gate, before their bodies are read (admitCall).
		connect.WithInterceptors(rpcm, tenants.NewAuthInterceptor(auth), connectapi.ErrorInterceptor{Logger: b.logger, Node: b.node}),
		connect.WithInterceptors(deps.Interceptors...),
		connect.WithReadMaxBytes(cfg.MaxRequestBytes),
		// Never gzip responses: record batches are compressed by their
		// producers already, and gzipping fetches cost more CPU than
		// anything else on the read path (cold reads went from 38 to
		// well over 100 MB/s without it). Compressed requests are still
		// accepted.
		connect.WithCompressMinBytes(math.MaxInt),
	}
	// Every call is authenticated, and its memory reserved, from its
	// headers before its body is read (internal/httpgate); the auth
	// interceptor then takes the gate's principal.
	b.gate = httpgate.New(cfg.RequestMemory.Config(int64(cfg.MaxRequestBytes)), httpgate.Deps{
		Auth: auth, Admit: b.admitCall, Registerer: b.registry, Namespace: "sluice", Subsystem: "broker", Logger: b.logger,
		Forwarded: func(r *http.Request) bool { return connectapi.ForwardedByBroker(r.Header, cfg.BrokerToken) },
	})
	mux := http.NewServeMux()
	mux.Handle(b.gate.Wrap(sluicev1connect.NewRecordServiceHandler(b.recordsAPI, opts...)))
	b.replicasAPI = connectapi.NewReplicas(connectapi.ReplicasDeps{
		BrokerID: cfg.ID, Sessions: b.sessions, Replica: b.partition, Groups: b.groups, Transactions: b.txnAPI,
	})
	mux.Handle(b.gate.Wrap(sluicev1connect.NewReplicaServiceHandler(b.replicasAPI, opts...)))
	mux.Handle(b.gate.Wrap(sluicev1connect.NewGroupServiceHandler(b.groupsHandler(), opts...)))
	mux.Handle(b.gate.Wrap(sluicev1connect.NewTransactionServiceHandler(b.txnAPI, opts...)))
	// Health and reflection pass the same gate and interceptors as the
	// services (public in the auth rules) and list only the client
	// services.
	mux.Handle(b.gate.Wrap(grpchealth.NewHandler(b.health, append(slices.Clone(opts), connect.WithInterceptors(healthwatch.EndOnDrain(b.runContext)))...)))
	// Reflection streams from anonymous clients: every message it reads
	// is held to an anonymous call's size (the gate charges only the
	// first).
	reflectOpts := append(slices.Clone(opts), connect.WithReadMaxBytes(httpgate.PublicMaxRequestBytes))
	reflector := grpcreflect.NewStaticReflector(connectapi.DiscoveryServices...)
	mux.Handle(b.gate.WrapClientStreams(grpcreflect.NewHandlerV1(reflector, reflectOpts...)))
	mux.Handle(b.gate.WrapClientStreams(grpcreflect.NewHandlerV1Alpha(reflector, reflectOpts...)))
	// No /metrics here: its labels name tenants, topics and groups, and
	// tenants reach this port. It is on the operator listener only.
	mux.HandleFunc("GET /healthz", opshttp.Healthz)
	mux.HandleFunc("GET /readyz", b.serveReady)
	// The caller's TLS certificate, for the authenticator (mutual TLS
	// inside the cluster).
	b.handler = tlsfiles.Handler(mux)
	if b.kafkaLn != nil {
		b.kafka = b.newKafka(brokerAuth, cpURL)
	}
	b.ops = opshttp.Handler(b.registry, b.serveReady)
	return b, nil
}

// OperatorHandler serves the operator listener: /metrics, /healthz and
// /readyz (see internal/opshttp).
func (b *Broker) OperatorHandler() http.Handler { return b.ops }

// Registry is the broker's private Prometheus registry.
func (b *Broker) Registry() *prometheus.Registry { return b.registry }

func (b *Broker) metadata() *cluster.View { return b.meta.Load() }

// partitions returns the local replicas at this moment (replicas.Manager.All).
func (b *Broker) partitions() []*partition.Replica { return b.replicas.All() }

// partition is the local replica of a partition, nil if none
// (replicas.Manager.Get): the services' replica lookup.
func (b *Broker) partition(topicID string, id int32) *partition.Replica {
	return b.replicas.Get(topicID, id)
}

// Run serves clients and brokers on ln and, when ops is not nil, the
// operator listener (OperatorHandler) on ops, and takes part in the
// cluster until ctx ends; then it drains and closes every log.
func (b *Broker) Run(ctx context.Context, ln, ops net.Listener) error {
	defer b.dirLock.Release()
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	b.mu.Lock()
	b.runCtx, b.stopRun = ctx, cancelCause
	b.mu.Unlock()

	ln, err := b.tls.APIListener(ln, b.logger)
	if err != nil {
		return err
	}
	if ops != nil {
		if ops, err = b.tls.OpsListener(ops, b.logger); err != nil {
			return err
		}
	}
	var xln net.Listener
	if b.external != nil {
		if xln, err = b.tls.ExternalListener(b.external, b.logger); err != nil {
			return err
		}
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           b.handler,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: 1000},
		ErrorLog:          slog.NewLogLogger(b.logger.Handler(), slog.LevelWarn),
		ConnContext:       b.gate.ConnContext,
	}
	errc := make(chan error, 4)
	go func() { errc <- srv.Serve(ln) }()
	logAttrs := []any{"addr", ln.Addr().String(), "advertised", b.cfg.Advertised(), "data_dir", b.cfg.DataDir}
	var extSrv *http.Server
	if xln != nil {
		extSrv = &http.Server{
			Handler:           endpoint.ExternalHandler(b.handler, "/"+sluicev1connect.ReplicaServiceName+"/"),
			Protocols:         srv.Protocols,
			ReadHeaderTimeout: srv.ReadHeaderTimeout,
			MaxHeaderBytes:    srv.MaxHeaderBytes,
			HTTP2:             srv.HTTP2,
			ErrorLog:          srv.ErrorLog,
			ConnContext:       endpoint.ExternalConnContext(b.gate.ConnContext),
		}
		go func() { errc <- fmt.Errorf("external listener: %w", extSrv.Serve(xln)) }()
		logAttrs = append(logAttrs, "external_addr", xln.Addr().String(), "external_advertised", b.cfg.ExternalAdvertised())
	}
	var kln net.Listener
	if b.kafkaLn != nil {
		if kln, err = b.tls.KafkaListener(b.kafkaLn, b.logger); err != nil {
			return err
		}
		logAttrs = append(logAttrs, "kafka_addr", kln.Addr().String(), "kafka_advertised", b.cfg.KafkaAdvertised())
	}
	var opsSrv *http.Server
	if ops != nil {
		opsSrv = opshttp.NewServer(b.ops, b.logger)
		go func() {
			if err := opsSrv.Serve(ops); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("operator listener: %w", err)
			}
		}()
		logAttrs = append(logAttrs, "metrics_addr", ops.Addr().String())
	}
	b.logger.Info("broker serving", logAttrs...)

	// Draining: health checks answer NOT_SERVING from now on.
	stopHealth := context.AfterFunc(ctx, b.healthChanged)
	defer stopHealth()
	var wg sync.WaitGroup
	wg.Go(func() { b.jwks.Run(ctx) })
	listRevoked := func(ctx context.Context, req *sluicev1.ListRevokedAPIKeysRequest) (*sluicev1.ListRevokedAPIKeysResponse, error) {
		res, err := b.cp.ListRevokedAPIKeys(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	wg.Go(func() { access.PollRevocations(ctx, listRevoked, b.revoked, 2*time.Second, b.logger, b.healthChanged) })
	wg.Go(func() { b.leaseLoop(ctx) })
	wg.Go(func() { b.isrLoop(ctx) })
	wg.Go(func() { b.replicas.HWCheckpointLoop(ctx, time.Second) })
	wg.Go(func() { b.replicas.RetentionLoop(ctx, b.cfg.RetentionCheckInterval) })
	if b.tier != nil {
		wg.Go(func() { b.tierLoop(ctx) })
	}
	wg.Go(func() { b.hostLoop(ctx) })
	wg.Go(func() { b.quota.Run(ctx) })
	if b.cfg.GroupLagMetricsInterval > 0 {
		wg.Go(func() { b.groupLagLoop(ctx, b.cfg.GroupLagMetricsInterval) })
	}
	wg.Go(func() { b.usage.Run(ctx) })
	if kln != nil {
		wg.Go(func() {
			if err := b.kafka.Serve(ctx, kln); err != nil {
				errc <- fmt.Errorf("kafka listener: %w", err)
			}
		})
	}

	select {
	case err = <-errc:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
	}
	cancel()
	shutCtx, stop := context.WithTimeout(context.Background(), b.cfg.ShutdownTimeout)
	defer stop()
	_ = srv.Shutdown(shutCtx)
	if extSrv != nil {
		_ = extSrv.Shutdown(shutCtx)
	}
	if opsSrv != nil {
		_ = opsSrv.Shutdown(shutCtx)
	}
	wg.Wait()
	b.rt.Close()
	// The client port has drained: nothing counts any more.
	b.finalUsageReport()
	b.replicas.Close()
	if b.tier != nil {
		_ = b.tier.Close()
	}
	return err
}

// failStop stops the broker after a local disk failure (a partition log
// refused a write). Like Kafka with a single log directory, the broker
// would rather stop than keep a lease it cannot honour: its lease expires
// and the controller moves its leaderships to in-sync replicas. Run returns
// the error.
func (b *Broker) failStop(topicID string, id int32, err error) {
	b.logger.Error("partition log failed: stopping the broker", "topic", topicID, "partition", id, "err", err)
	b.mu.Lock()
	stop := b.stopRun
	b.mu.Unlock()
	if stop != nil {
		stop(fmt.Errorf("partition %s/%d log failed: %w", topicID, id, err))
	}
}

// replicaHost is what this broker's partition replicas reach it through.
func (b *Broker) replicaHost() *partition.Host {
	return &partition.Host{
		ID:          b.cfg.ID,
		BrokerEpoch: b.brokerEpoch.Load,
		Logger:      b.logger,
		Metrics: &partition.Metrics{
			Duplicates: b.metrics.duplicates, SequenceErrors: b.metrics.sequenceErrors,
			ISRShrinks: b.metrics.isrShrinks, ISRExpands: b.metrics.isrExpands,
		},
		SegmentBytes:      b.cfg.SegmentBytes,
		SegmentAge:        b.cfg.SegmentAge,
		Flush:             b.flush,
		FlushInterval:     b.cfg.FlushInterval,
		Files:             b.files,
		ReplicaLagTimeMax: b.cfg.ReplicaLagTimeMax,
		LeaderAddress:     func(id int32) string { return b.metadata().Brokers[id].Address },
		ReplicaClient:     func(leader int32) fetcher.LeaderClient { return connectapi.LeaderClient{C: b.peers.Replica(leader)} },
		AlterPartition:    connectapi.AlterPartition(b.cp.AlterPartition),
		AlterPartitions:   connectapi.AlterPartitions(b.cp.AlterPartitions),
		FailStop:          b.failStop,
		Tier:              b.tier,
	}
}

// leaseLoop registers the broker, then heartbeats; when the control plane
// says the epoch is stale (the lease expired and this broker was declared
// dead), it registers again with a new epoch.
func (b *Broker) leaseLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		res, err := b.cp.RegisterBroker(ctx, connect.NewRequest(&sluicev1.RegisterBrokerRequest{
			BrokerId: b.cfg.ID, Address: b.cfg.Advertised(), ExternalAddress: b.cfg.ExternalAdvertised(), KafkaAddress: b.cfg.KafkaAdvertised(), Rack: b.cfg.Rack,
		}))
		if err != nil {
			if ctx.Err() == nil {
				b.logger.Warn("register with control plane", "err", err)
			}
			clock.Sleep(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		epoch := res.Msg.GetBrokerEpoch()
		b.brokerEpoch.Store(epoch)
		b.healthChanged()
		b.logger.Info("registered", "broker_epoch", epoch)
		interval := time.Duration(res.Msg.GetHeartbeatIntervalMs()) * time.Millisecond
		if interval <= 0 {
			interval = time.Second
		}
		watchCtx, stopWatch := context.WithCancel(ctx)
		watchDone := make(chan struct{})
		go func() { defer close(watchDone); b.watchLoop(watchCtx, epoch) }()
		b.heartbeat(ctx, epoch, interval)
		stopWatch()
		<-watchDone
	}
}

// heartbeat extends the lease until ctx ends or the epoch goes stale.
// Each heartbeat may take one interval (its deadline reaches the control
// plane, which gives up its place in the store's queue): one held up,
// say behind a busy store's writes, must not hold back the next, or a
// single slow call would cost the lease (three intervals).
func (b *Broker) heartbeat(ctx context.Context, epoch int64, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, interval)
		_, err := b.cp.HeartbeatBroker(hctx, connect.NewRequest(&sluicev1.HeartbeatBrokerRequest{BrokerId: b.cfg.ID, BrokerEpoch: epoch}))
		cancel()
		switch connect.CodeOf(err) {
		case connect.CodeFailedPrecondition, connect.CodeNotFound:
			b.logger.Warn("broker epoch fenced; registering again", "broker_epoch", epoch, "err", err)
			return
		}
		if err != nil && ctx.Err() == nil {
			b.logger.Warn("heartbeat", "err", err)
		}
	}
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// node is broker id as the current cluster view knows it.
func (b *Broker) node(id int32) (cluster.Node, bool) {
	n, ok := b.metadata().Brokers[id]
	return n, ok
}
