package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
)

// Options say what cluster New starts.
type Options struct {
	// DataDir holds the control plane's SQLite file (unless DatabaseURL
	// names another store) and one folder per broker, broker-<id>.
	DataDir string
	// Brokers is how many brokers StartBrokers starts (IDs 1 to Brokers);
	// 3 when 0.
	Brokers int
	// ListenAddr is the control plane's API address; a free loopback port
	// when empty.
	ListenAddr string
	// MetricsAddr, when set, is the control plane's operator listener
	// (metrics, health, profiles); none when empty.
	MetricsAddr string
	// BrokerMetrics gives each broker an operator listener on a free
	// loopback port.
	BrokerMetrics bool
	// KafkaAddr, when set, gives each broker a Kafka listener: with
	// port 0 on a free port of its host, else broker i (0-based) on the
	// port i above it (9092, 9093, 9094 for 9092). A restarted broker
	// binds the same address again.
	KafkaAddr string
	// DatabaseURL is the control plane's store: sqlite:<DataDir>/controlplane.db
	// when empty; a postgres:// URL otherwise.
	DatabaseURL string
	// BrokerToken and OperatorToken are the cluster's shared secrets;
	// fixed test values when empty.
	BrokerToken, OperatorToken string
	// ControlPlane, when set, adjusts the control plane's config after
	// the fields above are applied and its API port is bound: ListenAddr
	// is then the bound address (changing it has no effect).
	ControlPlane func(*controlplane.Config)
	// NewBroker builds each broker. Required by StartBrokers.
	NewBroker BrokerFunc
	// Logger is the control plane's (a BrokerFunc picks the brokers'); a
	// discarding one when nil.
	Logger *slog.Logger
	// TLS makes every server's API listener serve TLS and the servers
	// call each other with mutual TLS, with certificates from a throwaway
	// CA that New makes in <DataDir>/tls (Cluster.CAFile is its
	// certificate). Its key is never written: each New makes a new CA.
	// The operator listeners stay plaintext (on loopback, where
	// BrokerMetrics puts the brokers').
	TLS bool
}

// The secrets a cluster uses when Options leave them empty.
const (
	DefaultBrokerToken   = "broker-secret-for-tests-0123456789"
	DefaultOperatorToken = "operator-secret-for-tests-0123456789"
)

// A BrokerSpec is what the cluster decides about one broker; a BrokerFunc
// turns it into the broker's config.
type BrokerSpec struct {
	Index        int    // 0-based position in Cluster.Brokers
	ID           int32  // Index+1
	DataDir      string // <Options.DataDir>/broker-<ID>
	ControlPlane string // the control plane's URL
	BrokerToken  string
	Rack         string // rack-<ID>
	// Addr is the client port's address (the listener Run gets), to
	// advertise.
	Addr string
	// Interceptors go on the broker's client port (its
	// Deps.Interceptors): the cluster's fault injection.
	Interceptors []connect.Interceptor
	// TLS is the broker's TLS files (Options.TLS), none without.
	TLS tlsfiles.ServerFiles
	// KafkaAddr, with Options.KafkaAddr, is the Kafka listener's address, and
	// Kafka the listener bound there for this run (the broker's
	// Deps.Kafka); both empty without.
	KafkaAddr string
	Kafka     net.Listener
}

// A Node is a started broker.
type Node interface {
	// Run serves ln (the client port) and ops (the operator listener, or
	// nil) until ctx ends.
	Run(ctx context.Context, ln, ops net.Listener) error
}

// A BrokerFunc builds a broker from its spec. It is called again, with
// the same spec, when a stopped broker restarts.
type BrokerFunc func(BrokerSpec) (Node, error)

// Cluster is a running in-process cluster.
type Cluster struct {
	opts   Options
	logger *slog.Logger
	// Endpoint is the control plane's URL, "http://host:port" (https://
	// with Options.TLS).
	Endpoint string
	// CAFile, with Options.TLS, is the PEM certificate of the CA every
	// server's certificate chains to: what clients trust.
	CAFile string
	// MetricsAddr is the control plane's operator listener address, ""
	// without one.
	MetricsAddr string
	// BrokerToken and OperatorToken are the cluster's secrets.
	BrokerToken, OperatorToken string

	faults *Faults
	hc     *http.Client // speaks to Endpoint (trusting CAFile)
	ca     *tlsfiles.CA // with Options.TLS
	cp     *controlplane.Server
	stopCP context.CancelFunc
	cpErr  chan error // Run's result, once

	mu      sync.Mutex
	brokers []*brokerProc
	failed  chan error // a Run that ended on its own (buffered: the first)
}

// brokerProc is one broker and its current run.
type brokerProc struct {
	spec        BrokerSpec
	metricsAddr string
	node        Node       // nil while stopped
	stop        func()     // ends the run
	done        chan error // the run's result
	running     bool
}

// BrokerInfo is one broker as a cluster's user sees it.
type BrokerInfo struct {
	ID   int32
	Addr string // host:port of the client port
	// MetricsAddr is the operator listener's address, "" without one.
	MetricsAddr string
	// KafkaAddr is the Kafka listener's address, "" without one.
	KafkaAddr string
	// Node is the broker (the BrokerFunc's answer); nil while stopped.
	Node Node
}

// New starts the control plane and returns once it accepts connections.
// A busy address is reported before the store is touched.
func New(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.DataDir == "" {
		return nil, errors.New("localcluster: no data dir")
	}
	if opts.Brokers == 0 {
		opts.Brokers = 3
	}
	if opts.ListenAddr == "" {
		opts.ListenAddr = "127.0.0.1:0"
	}
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = "sqlite:" + filepath.Join(opts.DataDir, "controlplane.db")
	}
	if opts.BrokerToken == "" {
		opts.BrokerToken = DefaultBrokerToken
	}
	if opts.OperatorToken == "" {
		opts.OperatorToken = DefaultOperatorToken
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg := controlplane.DefaultConfig()
	cfg.ListenAddr = opts.ListenAddr
	cfg.MetricsAddr = opts.MetricsAddr
	cfg.DatabaseURL = opts.DatabaseURL
	cfg.BrokerToken, cfg.OperatorToken = opts.BrokerToken, opts.OperatorToken
	cfg.DefaultReplicationFactor = min(opts.Brokers, 3)
	// Bound before the hook runs, so that it sees the address the control
	// plane serves on (a test puts a proxy in front of it).
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
	}
	cfg.ListenAddr = ln.Addr().String()
	scheme, hc := "http", h2c.Client()
	var ca *tlsfiles.CA
	var caFile string
	if opts.TLS {
		scheme = "https"
		var cpFiles tlsfiles.Files
		if ca, caFile, cpFiles, err = newCA(opts.DataDir, "controlplane", tlsfiles.ControlPlaneURI); err != nil {
			ln.Close()
			return nil, err
		}
		cfg.TLS.API = tlsfiles.Files{Cert: cpFiles.Cert, Key: cpFiles.Key}
		cfg.TLS.Cluster = cpFiles
		trust, err := tlsfiles.Load(tlsfiles.Files{CA: caFile}, logger)
		if err != nil {
			ln.Close()
			return nil, err
		}
		hc = trust.HTTPClient()
	}
	if opts.ControlPlane != nil {
		opts.ControlPlane(&cfg)
	}
	var ops net.Listener
	if cfg.MetricsAddr != "" {
		if ops, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen on metrics address %s: %w", cfg.MetricsAddr, err)
		}
	}
	// The control plane outlives ctx's cancellation until Close: the
	// brokers stop first.
	cpCtx, stopCP := context.WithCancel(context.WithoutCancel(ctx))
	faults := &Faults{}
	srv, err := controlplane.New(cpCtx, cfg, controlplane.Deps{Logger: logger, Interceptors: []connect.Interceptor{faults.interceptor(ControlPlane)}})
	if err != nil {
		stopCP()
		ln.Close()
		if ops != nil {
			ops.Close()
		}
		return nil, err
	}
	c := &Cluster{
		opts: opts, logger: logger, Endpoint: scheme + "://" + ln.Addr().String(), CAFile: caFile, hc: hc, ca: ca,
		BrokerToken: cfg.BrokerToken, OperatorToken: cfg.OperatorToken,
		faults: faults, cp: srv, stopCP: stopCP, cpErr: make(chan error, 1), failed: make(chan error, 1),
	}
	if ops != nil {
		c.MetricsAddr = ops.Addr().String()
	}
	go func() {
		err := srv.Run(cpCtx, ln, ops)
		if cpCtx.Err() == nil {
			c.fail(fmt.Errorf("control plane: %w", orStopped(err)))
		}
		c.cpErr <- err
	}()
	return c, nil
}

// orStopped is err, or an error saying a server stopped when it returned
// nil on its own.
func orStopped(err error) error {
	if err == nil {
		return errors.New("stopped")
	}
	return err
}

// fail records the first process that ended on its own.
func (c *Cluster) fail(err error) {
	select {
	case c.failed <- err:
	default:
	}
}

// Failed is ready (with the error) when the control plane or a broker
// ends without being asked to (a stopped broker, or one stopped by
// StopBroker, does not count). Take the error at most once.
func (c *Cluster) Failed() <-chan error { return c.failed }

// ControlPlane is the control plane's server (its store, its metrics).
func (c *Cluster) ControlPlane() *controlplane.Server { return c.cp }

// Faults is the cluster's fault injection (AddFault, Clear).
func (c *Cluster) Faults() *Faults { return c.faults }

// AddFault is Faults().Add.
func (c *Cluster) AddFault(f Fault) *FaultHandle { return c.faults.Add(f) }

// StartBrokers starts the brokers, one after the other (in ID order: each
// is built, binds its ports and runs before the next starts), and returns
// once every one runs; not before they have registered (WaitBrokers).
// A broker that fails to start stops the ones started before it.
func (c *Cluster) StartBrokers(ctx context.Context) error {
	if c.opts.NewBroker == nil {
		return errors.New("localcluster: no NewBroker")
	}
	for i := range c.opts.Brokers {
		id := int32(i + 1)
		p := &brokerProc{spec: BrokerSpec{
			Index: i, ID: id, DataDir: filepath.Join(c.opts.DataDir, fmt.Sprintf("broker-%d", id)),
			ControlPlane: c.Endpoint, BrokerToken: c.BrokerToken, Rack: fmt.Sprintf("rack-%d", id),
			Addr: "127.0.0.1:0", Interceptors: []connect.Interceptor{c.faults.interceptor(id)},
		}}
		if c.ca != nil {
			f, err := issue(c.ca, filepath.Dir(c.CAFile), fmt.Sprintf("broker-%d", id), tlsfiles.BrokerURI(id))
			if err != nil {
				return err
			}
			f.CA = c.CAFile
			p.spec.TLS = tlsfiles.ServerFiles{API: tlsfiles.Files{Cert: f.Cert, Key: f.Key}, Cluster: f}
		}
		if c.opts.BrokerMetrics {
			p.metricsAddr = "127.0.0.1:0"
		}
		if c.opts.KafkaAddr != "" {
			addr, err := nthAddr(c.opts.KafkaAddr, i)
			if err != nil {
				return fmt.Errorf("kafka address of broker %d: %w", id, err)
			}
			p.spec.KafkaAddr = addr
		}
		if err := c.run(p); err != nil {
			return fmt.Errorf("start broker %d: %w", id, err)
		}
		c.mu.Lock()
		c.brokers = append(c.brokers, p)
		c.mu.Unlock()
	}
	return nil
}

// run binds p's ports (the addresses of its last run, when it had one),
// builds the broker and runs it.
func (c *Cluster) run(p *brokerProc) error {
	ln, err := net.Listen("tcp", p.spec.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.spec.Addr, err)
	}
	var ops net.Listener
	if p.metricsAddr != "" {
		if ops, err = net.Listen("tcp", p.metricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("listen on metrics address %s: %w", p.metricsAddr, err)
		}
		p.metricsAddr = ops.Addr().String()
	}
	p.spec.Addr = ln.Addr().String()
	p.spec.Kafka = nil
	if p.spec.KafkaAddr != "" {
		if p.spec.Kafka, err = net.Listen("tcp", p.spec.KafkaAddr); err != nil {
			ln.Close()
			if ops != nil {
				ops.Close()
			}
			return fmt.Errorf("listen on Kafka address %s: %w", p.spec.KafkaAddr, err)
		}
		p.spec.KafkaAddr = p.spec.Kafka.Addr().String()
	}
	node, err := c.opts.NewBroker(p.spec)
	if err != nil {
		ln.Close()
		if ops != nil {
			ops.Close()
		}
		if p.spec.Kafka != nil {
			p.spec.Kafka.Close()
		}
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	p.node, p.stop, p.done, p.running = node, stop, done, true
	go func() {
		err := node.Run(ctx, ln, ops)
		if ctx.Err() == nil {
			c.fail(fmt.Errorf("broker %d: %w", p.spec.ID, orStopped(err)))
		}
		done <- err
	}()
	return nil
}

// Brokers lists the brokers, by index (ID-1).
func (c *Cluster) Brokers() []BrokerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]BrokerInfo, len(c.brokers))
	for i, p := range c.brokers {
		out[i] = BrokerInfo{ID: p.spec.ID, Addr: p.spec.Addr, MetricsAddr: p.metricsAddr, KafkaAddr: p.spec.KafkaAddr}
		if p.running {
			out[i].Node = p.node
		}
	}
	return out
}

// StopBroker stops broker i (by index) and waits for its Run to return,
// with that error. Stopping a stopped broker does nothing.
func (c *Cluster) StopBroker(i int) error {
	c.mu.Lock()
	p := c.brokers[i]
	if !p.running {
		c.mu.Unlock()
		return nil
	}
	p.running = false
	c.mu.Unlock()
	p.stop()
	return <-p.done
}

// RestartBroker starts stopped broker i again on its folder and its
// previous addresses (a restarted process), building it anew with the
// BrokerFunc.
func (c *Cluster) RestartBroker(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.brokers[i]
	if p.running {
		return fmt.Errorf("restart broker %d: it runs", p.spec.ID)
	}
	if err := c.run(p); err != nil {
		return fmt.Errorf("restart broker %d: %w", p.spec.ID, err)
	}
	return nil
}

// Close stops the brokers, then the control plane (so that the brokers do
// not warn of a control plane going away), and returns the first error of
// their runs: nil after a clean stop.
func (c *Cluster) Close() error {
	var err error
	for i := range c.Brokers() {
		if berr := c.StopBroker(i); berr != nil && err == nil {
			err = berr
		}
	}
	c.stopCP()
	if cerr := <-c.cpErr; cerr != nil && err == nil {
		err = cerr
	}
	c.cpErr <- nil // a second Close returns at once
	c.cp.Close()
	return err
}

// WaitBrokers waits until the control plane counts every broker live,
// for up to timeout.
func (c *Cluster) WaitBrokers(ctx context.Context, timeout time.Duration) error {
	op := sluicev1connect.NewOperatorServiceClient(c.hc, c.Endpoint, connect.WithInterceptors(tenants.Bearer(c.OperatorToken)))
	n := c.opts.Brokers
	deadline := time.Now().Add(timeout)
	for {
		res, err := op.ListBrokers(ctx, connect.NewRequest(&sluicev1.ListBrokersRequest{}))
		if err == nil {
			live := 0
			for _, b := range res.Msg.GetBrokers() {
				if b.GetLive() {
					live++
				}
			}
			if live >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("brokers did not join the control plane within %v (last error: %v)", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A Tenant is a signed-up tenant's credentials.
type Tenant struct {
	ID     string
	APIKey string
	// Token is a JWT for it, from the control plane's AuthService.
	Token string
}

// SignUp signs a tenant up through the API and, unless plan is empty,
// puts it on that plan (the operator's UpdateTenant).
func (c *Cluster) SignUp(ctx context.Context, email, name, plan string) (Tenant, error) {
	hc := c.hc
	su, err := sluicev1connect.NewTenantServiceClient(hc, c.Endpoint).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: email, TenantName: name}))
	if err != nil {
		return Tenant{}, fmt.Errorf("sign up %s: %w", name, err)
	}
	t := Tenant{ID: su.Msg.GetTenant().GetId(), APIKey: su.Msg.GetApiKeySecret()}
	if plan != "" {
		op := sluicev1connect.NewOperatorServiceClient(hc, c.Endpoint, connect.WithInterceptors(tenants.Bearer(c.OperatorToken)))
		if _, err := op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: t.ID, Plan: &plan})); err != nil {
			return Tenant{}, fmt.Errorf("put %s on plan %s: %w", name, plan, err)
		}
	}
	tok, err := sluicev1connect.NewAuthServiceClient(hc, c.Endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: t.APIKey}))
	if err != nil {
		return Tenant{}, fmt.Errorf("log in as %s: %w", name, err)
	}
	t.Token = tok.Msg.GetToken()
	return t, nil
}

// newCA makes a CA in dir/tls, writes its certificate there (caFile) and
// issues the first server's certificate, name.crt and name.key, for
// identity (a cluster URI SAN): files holds them and caFile.
func newCA(dir, name, identity string) (ca *tlsfiles.CA, caFile string, files tlsfiles.Files, err error) {
	dir = filepath.Join(dir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", files, fmt.Errorf("localcluster: %w", err)
	}
	if ca, err = tlsfiles.NewCA("Sluice local CA", caValidity); err != nil {
		return nil, "", files, err
	}
	caFile = filepath.Join(dir, "ca.crt")
	if err := ca.WriteCert(caFile); err != nil {
		return nil, "", files, err
	}
	if files, err = issue(ca, dir, name, identity); err != nil {
		return nil, "", files, err
	}
	files.CA = caFile
	return ca, caFile, files, nil
}

// caValidity is how long the throwaway CA and its certificates are valid.
const caValidity = 365 * 24 * time.Hour

// issue writes a certificate for a server of the cluster on loopback
// (127.0.0.1, ::1, localhost), for its listener and its calls to the
// others (identity, a cluster URI SAN), as dir/name.crt and name.key.
func issue(ca *tlsfiles.CA, dir, name, identity string) (tlsfiles.Files, error) {
	return ca.IssueFiles(dir, name, tlsfiles.Leaf{
		CommonName: "sluice " + name, Hosts: []string{"127.0.0.1", "::1", "localhost"}, URIs: []string{identity},
		Server: true, Client: true, ValidFor: caValidity,
	})
}

// nthAddr is host:port's address for the i-th broker: the same with port
// 0, else the port i above.
func nthAddr(addr string, i int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n+i > 65535 {
		return "", fmt.Errorf("%q: bad port", addr)
	}
	if n == 0 {
		return addr, nil
	}
	return net.JoinHostPort(host, strconv.Itoa(n+i)), nil
}
