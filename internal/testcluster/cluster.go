package testcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// newSecret is a cluster's operator or broker token: its own, so that a
// test capturing loopback traffic (TestTLSCapture) can tell its cluster's
// from the others running in parallel. Tests need not know them.
func newSecret(kind string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "e2e-" + kind + "-token-" + hex.EncodeToString(b)
}

// Options configure a cluster. Zero values take the defaults below.
type Options struct {
	// Bin is the sluice binary (required).
	Bin string
	// DatabaseURL is a fresh Postgres database (testenv.PostgresURL).
	DatabaseURL string
	// Brokers is how many brokers to start, ids 1..Brokers (default 3).
	Brokers int
	// BrokerLease is the control plane's --broker-lease (default 3s).
	BrokerLease time.Duration
	// ReplicaLagTimeMax is every broker's --replica-lag-time-max (default 5s).
	ReplicaLagTimeMax time.Duration
	// PreferredLeaderDelay is the control plane's --preferred-leader-delay
	// (default 10s).
	PreferredLeaderDelay time.Duration
	// Proxies puts a Proxy in front of every broker (the broker advertises
	// it, so other brokers reach it through it) and another between every
	// broker and the control plane. Test clients still dial brokers
	// directly.
	Proxies bool
	// RPCProxies puts an RPCProxy between every broker and the control
	// plane (Broker.RPC; behind its CP proxy with Proxies), to lose the
	// answers of one method only.
	RPCProxies bool
	// Flush is every broker's --flush (default always).
	Flush string
	// GroupHeartbeatInterval and GroupSessionTimeout are every broker's
	// --group-heartbeat-interval and --group-session-timeout (defaults
	// 500ms and 5s, shorter than production so group tests run fast).
	GroupHeartbeatInterval, GroupSessionTimeout time.Duration
	// ExtraControlPlaneArgs are added to the control plane's command line.
	ExtraControlPlaneArgs []string
	// ExtraBrokerArgs are added to every broker's command line after the
	// flags above (a repeated flag overrides theirs), e.g. tiered storage
	// flags.
	ExtraBrokerArgs []string
	// BrokerEnv are extra KEY=VALUE environment entries of every broker
	// process (e.g. AWS credentials for tiered storage on S3).
	BrokerEnv []string
	// TLS serves TLS on every listener of every process (API and
	// operator) with certificates from a CA the cluster makes in
	// Dir/tls (Cluster.CA), and the servers call each other with mutual
	// TLS: each presents its certificate, naming it (sluice://broker/<id>,
	// sluice://controlplane). The cluster's own client trusts the CA.
	TLS bool
	// External (with TLS) gives the control plane and every broker an
	// external listener (TLS, no client certificate asked), and makes
	// their API listeners internal: a client certificate from the
	// cluster's CA is required there (the cluster's own client has one).
	// A client outside the cluster, without one, uses the external
	// listeners only (Cluster.ExternalControlPlane).
	External bool
	// Kafka gives every broker a Kafka listener (Broker.KafkaAddr); with
	// TLS it serves TLS too (SASL_SSL), with a certificate from the
	// cluster's CA.
	Kafka bool
}

func (o *Options) defaults() {
	if o.Brokers == 0 {
		o.Brokers = 3
	}
	if o.BrokerLease == 0 {
		o.BrokerLease = 3 * time.Second
	}
	if o.ReplicaLagTimeMax == 0 {
		o.ReplicaLagTimeMax = 5 * time.Second
	}
	if o.PreferredLeaderDelay == 0 {
		o.PreferredLeaderDelay = 10 * time.Second
	}
	if o.Flush == "" {
		o.Flush = "always"
	}
	if o.GroupHeartbeatInterval == 0 {
		o.GroupHeartbeatInterval = 500 * time.Millisecond
	}
	if o.GroupSessionTimeout == 0 {
		o.GroupSessionTimeout = 5 * time.Second
	}
}

// Cluster is a running control plane and its brokers.
type Cluster struct {
	t    testing.TB
	opts Options
	// Dir holds every process's log and data; kept when the test fails.
	Dir string

	cpAddr, cpMetricsAddr, cpExternalAddr string
	cp                                    *proc
	brokers                               map[int32]*Broker
	hc                                    *http.Client
	// The cluster's secrets (newSecret).
	operatorToken, brokerToken string
	// scheme is the processes' listeners': http, or https with TLS.
	scheme string
	// CA, with Options.TLS, issued every process's certificate; CAFile is
	// its certificate (what a client trusts) and TLSDir the folder holding
	// them all (<name>.crt and .key: controlplane, broker-<id>).
	CA             *tlsfiles.CA
	CAFile, TLSDir string
}

// Broker is one broker process slot: it keeps its id, ports and data dir
// across restarts.
type Broker struct {
	ID int32
	// ListenAddr is where the process listens; test clients dial it.
	ListenAddr string
	// MetricsAddr is its operator listener (--metrics-addr): /metrics,
	// /healthz, /readyz.
	MetricsAddr string
	// ExternalAddr, with Options.External, is its external listener, which
	// it advertises as it is.
	ExternalAddr string
	// KafkaAddr, with Options.Kafka, is its Kafka listener, which it
	// advertises as it is.
	KafkaAddr string
	// DataDir holds its partition logs.
	DataDir string
	// LogPath is its output, appended across restarts.
	LogPath string
	// In, with Options.Proxies, is the proxy other brokers reach it through
	// (its advertised address); CP the proxy it reaches the control plane
	// through. Both nil otherwise.
	In, CP *Proxy
	// RPC, with Options.RPCProxies, is the gRPC proxy its calls to the
	// control plane pass (after CP, when there is one); nil otherwise.
	RPC *RPCProxy

	proc *proc
}

// Advertised is the address other brokers reach this one at.
func (b *Broker) Advertised() string {
	if b.In != nil {
		return b.In.Addr()
	}
	return b.ListenAddr
}

// Start runs a control plane and opts.Brokers brokers and waits until every
// broker is registered and live. Everything stops at the test's cleanup.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts.defaults()
	if opts.Bin == "" || opts.DatabaseURL == "" {
		t.Fatal("testcluster: Options.Bin and Options.DatabaseURL are required")
	}
	dir, err := os.MkdirTemp("", "sluice-cluster-"+sanitize(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, opts: opts, Dir: dir, brokers: map[int32]*Broker{}, hc: testClient(nil), scheme: "http",
		operatorToken: newSecret("operator"), brokerToken: newSecret("broker")}
	t.Cleanup(c.cleanup)
	var cpTLS []string
	if opts.TLS {
		c.scheme = "https"
		cpTLS = c.newCA()
	}
	if opts.External {
		if !opts.TLS {
			t.Fatal("testcluster: Options.External needs Options.TLS")
		}
		c.cpExternalAddr = FreeAddr(t)
		cpTLS = append(cpTLS, c.externalArgs("controlplane", c.cpExternalAddr, "")...)
	}

	c.cpAddr, c.cpMetricsAddr = FreeAddr(t), FreeAddr(t)
	c.cp, err = startProc("controlplane", opts.Bin, filepath.Join(dir, "controlplane.log"), nil, append([]string{
		"controlplane",
		"--listen-addr", c.cpAddr,
		"--metrics-addr", c.cpMetricsAddr,
		"--database-url", opts.DatabaseURL,
		"--operator-token", c.operatorToken,
		"--broker-token", c.brokerToken,
		"--broker-lease", opts.BrokerLease.String(),
		"--preferred-leader-delay", opts.PreferredLeaderDelay.String(),
		// Every tenant of a test signs up from loopback: production's
		// per-address signup limit (5, then 1 per 10 minutes) would refuse
		// a test's sixth.
		"--signup-limit", "1000", "--signup-limit-interval", "1ms",
	}, slices.Concat(cpTLS, opts.ExtraControlPlaneArgs)...))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Wait(t, 60*time.Second, "control plane ready", func() error {
		if done, err := c.cp.exited(); done {
			return testenv.Permanent(fmt.Errorf("control plane exited: %v\n%s", err, tail(c.cp.logPath, 4000)))
		}
		return httpOK(c.hc, c.URL(c.cpAddr)+"/readyz")
	})

	for i := 1; i <= opts.Brokers; i++ {
		b := &Broker{
			ID:          int32(i),
			ListenAddr:  FreeAddr(t),
			MetricsAddr: FreeAddr(t),
			ExternalAddr: func() string {
				if opts.External {
					return FreeAddr(t)
				}
				return ""
			}(),
			KafkaAddr: func() string {
				if opts.Kafka {
					return FreeAddr(t)
				}
				return ""
			}(),
			DataDir: filepath.Join(dir, fmt.Sprintf("broker-%d", i)),
			LogPath: filepath.Join(dir, fmt.Sprintf("broker-%d.log", i)),
		}
		cpTarget := c.cpAddr
		if opts.RPCProxies {
			b.RPC = NewRPCProxy(t, c.cpAddr)
			cpTarget = b.RPC.Addr()
		}
		if opts.Proxies {
			b.In = NewProxy(t, b.ListenAddr)
			b.CP = NewProxy(t, cpTarget)
		}
		c.brokers[b.ID] = b
		c.startServing(b)
	}
	c.WaitLive(c.BrokerIDs()...)
	return c
}

func (c *Cluster) startBroker(b *Broker) {
	c.t.Helper()
	cp := c.cpAddr
	if b.RPC != nil {
		cp = b.RPC.Addr()
	}
	if b.CP != nil {
		cp = b.CP.Addr()
	}
	args := []string{
		"broker",
		"--id", strconv.Itoa(int(b.ID)),
		"--listen-addr", b.ListenAddr,
		"--metrics-addr", b.MetricsAddr,
		"--advertised-addr", b.Advertised(),
		"--data-dir", b.DataDir,
		"--control-plane", c.URL(cp),
		"--broker-token", c.brokerToken,
		"--flush", c.opts.Flush,
		"--replica-lag-time-max", c.opts.ReplicaLagTimeMax.String(),
		"--group-heartbeat-interval", c.opts.GroupHeartbeatInterval.String(),
		"--group-session-timeout", c.opts.GroupSessionTimeout.String(),
	}
	if c.CA != nil {
		args = append(args, c.serverTLSArgs(fmt.Sprintf("broker-%d", b.ID), tlsfiles.BrokerURI(b.ID))...)
	}
	if b.ExternalAddr != "" {
		args = append(args, c.externalArgs(fmt.Sprintf("broker-%d", b.ID), b.ExternalAddr, b.ExternalAddr)...)
	}
	if b.KafkaAddr != "" {
		args = append(args, "--kafka-addr", b.KafkaAddr)
		if c.CA != nil {
			name := fmt.Sprintf("broker-%d", b.ID)
			args = append(args, "--kafka-tls-cert", filepath.Join(c.TLSDir, name+".crt"), "--kafka-tls-key", filepath.Join(c.TLSDir, name+".key"))
		}
	}
	args = append(args, c.opts.ExtraBrokerArgs...)
	p, err := startProc(fmt.Sprintf("broker-%d", b.ID), c.opts.Bin, b.LogPath, c.opts.BrokerEnv, args)
	if err != nil {
		c.t.Fatal(err)
	}
	b.proc = p
}

// startServing starts a broker and waits until it serves. Its ports
// were free when FreeAddr picked them (or when it last ran on them), but
// another process may bind one before the broker does; a broker that exits
// because an address is in use is started again with a new port for that
// address.
func (c *Cluster) startServing(b *Broker) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		start := logSize(b.LogPath)
		c.startBroker(b)
		var inUse string
		testenv.Wait(c.t, 30*time.Second, fmt.Sprintf("broker %d listening", b.ID), func() error {
			out := readFrom(b.LogPath, start)
			if done, _ := b.proc.exited(); done {
				inUse = addrInUse(out, b.ListenAddr, b.MetricsAddr)
				return nil
			}
			if !strings.Contains(out, "broker serving") {
				return errors.New("not serving yet")
			}
			return nil
		})
		if inUse == "" || attempt == 5 {
			return // WaitLive reports any other exit with its log
		}
		c.t.Logf("testcluster: broker %d could not bind %s; trying another port", b.ID, inUse)
		if inUse == b.MetricsAddr {
			b.MetricsAddr = FreeAddr(c.t)
			continue
		}
		b.ListenAddr = FreeAddr(c.t)
		if b.In != nil {
			b.In.setTarget(b.ListenAddr)
		}
	}
}

// addrInUse returns which of addrs a process's output says was in use
// when it tried to listen, or "".
func addrInUse(out string, addrs ...string) string {
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "address already in use") {
			continue
		}
		for _, a := range addrs {
			if strings.Contains(line, a) {
				return a
			}
		}
	}
	return ""
}

// logSize is the size of a log file, 0 when it does not exist yet.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readFrom returns a file's contents from offset on ("" on errors).
func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}

func (c *Cluster) cleanup() {
	t := c.t
	for _, id := range c.BrokerIDs() {
		if p := c.brokers[id].proc; p != nil {
			p.kill()
		}
	}
	if c.cp != nil {
		c.cp.kill()
	}
	c.hc.CloseIdleConnections()
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			if r := DataRace(string(b)); r != "" {
				t.Errorf("testcluster: %s reports a data race (the binary is built with -race):\n%s", filepath.Base(l), r)
			}
		}
	}
	if t.Failed() || os.Getenv("SLUICE_KEEP_CLUSTER") != "" {
		t.Logf("testcluster: kept %s (logs, data dirs, history)", c.Dir)
		for _, l := range logs {
			t.Logf("--- tail of %s:\n%s", l, tail(l, 6000))
		}
		return
	}
	_ = os.RemoveAll(c.Dir)
}

// BrokerIDs lists the broker ids in order.
func (c *Cluster) BrokerIDs() []int32 {
	ids := make([]int32, 0, len(c.brokers))
	for id := range c.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Broker returns a broker slot by id.
func (c *Cluster) Broker(id int32) *Broker {
	b, ok := c.brokers[id]
	if !ok {
		c.t.Fatalf("testcluster: no broker %d", id)
	}
	return b
}

// ControlPlane is the control plane's URL.
func (c *Cluster) ControlPlane() string { return c.URL(c.cpAddr) }

// ExternalControlPlane is the URL of the control plane's external
// listener (Options.External).
func (c *Cluster) ExternalControlPlane() string { return c.URL(c.cpExternalAddr) }

// URL is the base URL of a listener of the cluster's processes at addr:
// http://addr, or https://addr with Options.TLS.
func (c *Cluster) URL(addr string) string { return c.scheme + "://" + addr }

// ControlPlaneMetricsAddr is the control plane's operator listener
// (--metrics-addr): /metrics, /healthz, /readyz.
func (c *Cluster) ControlPlaneMetricsAddr() string { return c.cpMetricsAddr }

// ControlPlanePID is the control plane process's pid.
func (c *Cluster) ControlPlanePID() int { return c.cp.cmd.Process.Pid }

// PID is the broker's running process's pid (0 when it never started).
func (b *Broker) PID() int {
	if b.proc == nil {
		return 0
	}
	return b.proc.cmd.Process.Pid
}

// Kill SIGKILLs a broker and waits for it to exit.
func (c *Cluster) Kill(id int32) {
	c.t.Helper()
	b := c.Broker(id)
	if b.proc == nil {
		c.t.Fatalf("testcluster: broker %d is not running", id)
	}
	b.proc.kill()
	c.mark("SIGKILL broker %d", id)
}

// Pause SIGSTOPs a broker.
func (c *Cluster) Pause(id int32) {
	c.t.Helper()
	if err := c.Broker(id).proc.signal(syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	c.mark("SIGSTOP broker %d", id)
}

// Resume SIGCONTs a paused broker.
func (c *Cluster) Resume(id int32) {
	c.t.Helper()
	if err := c.Broker(id).proc.signal(syscall.SIGCONT); err != nil {
		c.t.Fatal(err)
	}
	c.mark("SIGCONT broker %d", id)
}

// Restart starts a broker that was killed (or kills it first), with its
// data dir as it is or, with wipe, emptied, and waits until it listens (on
// a new port for an address another process took meanwhile). It does not
// wait for it to be live; see WaitLive.
func (c *Cluster) Restart(id int32, wipe bool) {
	c.t.Helper()
	b := c.Broker(id)
	if b.proc != nil {
		if done, _ := b.proc.exited(); !done {
			b.proc.kill()
		}
	}
	if wipe {
		if err := os.RemoveAll(b.DataDir); err != nil {
			c.t.Fatal(err)
		}
	}
	c.mark("restart broker %d (wipe=%t)", id, wipe)
	c.startServing(b)
}

// mark writes a line into every process log, so faults line up with what
// the processes logged.
func (c *Cluster) mark(format string, args ...any) {
	line := fmt.Sprintf("=== testcluster %s: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	c.t.Log(strings.TrimSpace(line))
	paths := []string{filepath.Join(c.Dir, "controlplane.log")}
	for _, id := range c.BrokerIDs() {
		paths = append(paths, c.brokers[id].LogPath)
	}
	for _, p := range paths {
		if f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, _ = f.WriteString(line)
			f.Close()
		}
	}
}

// Mark writes a note into the test log and every process log.
func (c *Cluster) Mark(format string, args ...any) { c.mark(format, args...) }

func (c *Cluster) operator() sluicev1connect.OperatorServiceClient {
	return sluicev1connect.NewOperatorServiceClient(c.hc, c.ControlPlane(), connect.WithGRPC(), bearer(c.operatorToken))
}

// SetTenantStatus is the operator suspending ("suspended") or reinstating
// ("active") a tenant.
func (c *Cluster) SetTenantStatus(ctx context.Context, tenantID, status string) error {
	_, err := c.operator().UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: tenantID, Status: &status}))
	if err == nil {
		c.mark("tenant %s is now %s", tenantID, status)
	}
	return err
}

// LiveBrokers asks the control plane which brokers hold a live lease.
func (c *Cluster) LiveBrokers(ctx context.Context) ([]int32, error) {
	res, err := c.operator().ListBrokers(ctx, connect.NewRequest(&sluicev1.ListBrokersRequest{}))
	if err != nil {
		return nil, err
	}
	var live []int32
	for _, b := range res.Msg.GetBrokers() {
		if b.GetLive() {
			live = append(live, b.GetId())
		}
	}
	slices.Sort(live)
	return live, nil
}

// WaitLive waits until the control plane lists every broker in ids as live
// (registered with a current lease) and each one answers /readyz.
func (c *Cluster) WaitLive(ids ...int32) {
	c.t.Helper()
	testenv.Wait(c.t, 60*time.Second, fmt.Sprintf("brokers %v live", ids), func() error {
		for _, id := range ids {
			if done, err := c.Broker(id).proc.exited(); done {
				return testenv.Permanent(fmt.Errorf("broker %d exited: %v\n%s", id, err, tail(c.Broker(id).LogPath, 4000)))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		live, err := c.LiveBrokers(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if !slices.Contains(live, id) {
				return fmt.Errorf("live brokers %v", live)
			}
			if err := httpOK(c.hc, c.URL(c.Broker(id).ListenAddr)+"/readyz"); err != nil {
				return fmt.Errorf("broker %d: %w", id, err)
			}
		}
		return nil
	})
}

// WaitDead waits until the control plane no longer lists id as live (its
// lease expired).
func (c *Cluster) WaitDead(id int32) {
	c.t.Helper()
	testenv.Wait(c.t, 30*time.Second, fmt.Sprintf("broker %d's lease expired", id), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		live, err := c.LiveBrokers(ctx)
		if err != nil {
			return err
		}
		if slices.Contains(live, id) {
			return fmt.Errorf("still live: %v", live)
		}
		return nil
	})
}

// PartitionDir is where broker id keeps a partition's log.
func (c *Cluster) PartitionDir(id int32, tenantID, topicID string, partition int32) string {
	return filepath.Join(c.Broker(id).DataDir, tenantID, fmt.Sprintf("%s-%d", topicID, partition))
}

// FreeAddr returns a loopback address that was free a moment ago, was not
// returned before in this process, and lies below the ephemeral port range
// (testenv.FreePort), so a broker restarted on it finds it free.
func FreeAddr(t testing.TB) string {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func httpOK(hc *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return nil
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, name)
}

// DataRace returns the first data race report in a process's output (a
// binary built with -race prints one and keeps running), or "".
func DataRace(out string) string {
	i := strings.Index(out, "WARNING: DATA RACE")
	if i < 0 {
		return ""
	}
	r := out[i:]
	if j := strings.Index(r, "\n==================\n"); j >= 0 {
		r = r[:j]
	}
	return r[:min(len(r), 8000)]
}

// Secrets are the cluster's operator and broker tokens, for a test that
// looks for them where they must not be.
func (c *Cluster) Secrets() []string { return []string{c.operatorToken, c.brokerToken} }

// KafkaBootstrap is the brokers' Kafka listeners (Options.Kafka), by id.
func (c *Cluster) KafkaBootstrap() []string {
	var out []string
	for _, id := range c.BrokerIDs() {
		out = append(out, c.brokers[id].KafkaAddr)
	}
	return out
}
