package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/dataplane/cluster"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// usageKey is a report's idempotency key.
type usageKey struct {
	broker   int32
	epoch    int64
	sequence int64
}

// fakeUsage is the control plane's ReportUsage as broker.proto specifies
// it (counters once per key; a range applied only at its partition's
// cursor, not from an older leader epoch; every named partition's cursor
// answered), and checks what the brokers send: a key sent again carries
// the same report, and each broker epoch's sequences run 1, 2, 3, ...
// Every dropEvery-th answer is lost after the report was handled.
type fakeUsage struct {
	sluicev1connect.UnimplementedBrokerServiceHandler

	mu         sync.Mutex
	dropEvery  int
	calls      int
	retries    int
	reports    map[usageKey]*sluicev1.ReportUsageRequest
	newest     map[[2]int64]int64 // (broker, epoch) → newest sequence
	violations []string
	cursors    map[cluster.PartKey]int64
	epochs     map[cluster.PartKey]int32
	ingress    map[cluster.PartKey]int64
	egress     map[string]int64
	requests   map[string]int64
}

func newFakeUsage(dropEvery int) *fakeUsage {
	return &fakeUsage{dropEvery: dropEvery, reports: map[usageKey]*sluicev1.ReportUsageRequest{}, newest: map[[2]int64]int64{},
		cursors: map[cluster.PartKey]int64{}, epochs: map[cluster.PartKey]int32{}, ingress: map[cluster.PartKey]int64{}, egress: map[string]int64{}, requests: map[string]int64{}}
}

func (f *fakeUsage) ReportUsage(_ context.Context, req *connect.Request[sluicev1.ReportUsageRequest]) (*connect.Response[sluicev1.ReportUsageResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := req.Msg
	f.calls++
	k := usageKey{m.GetBrokerId(), m.GetBrokerEpoch(), m.GetSequence()}
	res := &sluicev1.ReportUsageResponse{}
	if prev, ok := f.reports[k]; ok {
		if !proto.Equal(prev, m) {
			f.violations = append(f.violations, fmt.Sprintf("%v sent again with other content: %v, then %v", k, prev, m))
		}
		f.retries++
		res.Duplicate = true
	} else {
		be := [2]int64{int64(k.broker), k.epoch}
		if want := f.newest[be] + 1; k.sequence != want {
			f.violations = append(f.violations, fmt.Sprintf("broker %d epoch %d: sequence %d, want %d", k.broker, k.epoch, k.sequence, want))
		}
		f.newest[be] = max(f.newest[be], k.sequence)
		f.reports[k] = proto.Clone(m).(*sluicev1.ReportUsageRequest)
		for _, c := range m.GetCounters() {
			f.egress[c.GetTenantId()] += c.GetEgressBytes()
			f.requests[c.GetTenantId()] += c.GetRequests()
		}
		for _, g := range m.GetIngress() {
			pk := cluster.PartKey{TopicID: g.GetTopicId(), Partition: g.GetPartition()}
			if g.GetLeaderEpoch() < f.epochs[pk] {
				continue
			}
			f.epochs[pk] = g.GetLeaderEpoch()
			if g.GetEndOffset() > g.GetStartOffset() && g.GetStartOffset() == f.cursors[pk] {
				f.cursors[pk] = g.GetEndOffset()
				f.ingress[pk] += g.GetBytes()
			}
		}
	}
	for _, g := range m.GetIngress() {
		pk := cluster.PartKey{TopicID: g.GetTopicId(), Partition: g.GetPartition()}
		res.Cursors = append(res.Cursors, &sluicev1.IngressCursor{TopicId: pk.TopicID, Partition: pk.Partition, NextOffset: f.cursors[pk]})
	}
	if f.dropEvery > 0 && f.calls%f.dropEvery == 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("answer lost"))
	}
	return connect.NewResponse(res), nil
}

// state returns copies of what the fake applied.
func (f *fakeUsage) state() (ingress, cursors map[cluster.PartKey]int64, egress, requests map[string]int64, retries int, violations []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := func(m map[cluster.PartKey]int64) map[cluster.PartKey]int64 {
		out := map[cluster.PartKey]int64{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	cs := func(m map[string]int64) map[string]int64 {
		out := map[string]int64{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return cp(f.ingress), cp(f.cursors), cs(f.egress), cs(f.requests), f.retries, append([]string(nil), f.violations...)
}

// serveFakeUsage serves f's ReportUsage on a new loopback port and
// passes every other call to the control plane at cp, as the brokers'
// --control-plane.
func serveFakeUsage(t testing.TB, cp string, f *fakeUsage) string {
	t.Helper()
	u, err := url.Parse(cp)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = h2c.Client().Transport
	rp.FlushInterval = -1 // WatchAssignments streams
	mux := http.NewServeMux()
	_, h := sluicev1connect.NewBrokerServiceHandler(f)
	mux.Handle(sluicev1connect.BrokerServiceReportUsageProcedure, h)
	mux.Handle("/", rp)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	ln := listenLoopback(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// logDataBytes sums the data batches (markers left out) of broker b's
// replica of the partition below its HW, read straight from its log.
func logDataBytes(t testing.TB, b *Broker, topicID string, part int32) (bytes, hw int64) {
	t.Helper()
	p := b.partition(topicID, part)
	require.NotNil(t, p)
	hw = p.HighWatermark()
	for off := int64(0); off < hw; {
		data, err := p.Log().Read(off, 1<<20)
		require.NoError(t, err)
		for len(data) > 0 && off < hw {
			rb, rest, err := record.ReadBatch(data)
			require.NoError(t, err)
			h := rb.Header()
			if !h.Attributes.Control() {
				bytes += int64(len(rb))
			}
			off, data = h.LastOffset()+1, rest
		}
	}
	return bytes, hw
}

// meterClient is the tenant's RecordService client of one broker,
// counting the calls it makes.
type meterClient struct {
	records sluicev1connect.RecordServiceClient
	calls   *int
}

func (c *lagCluster) meterClients(calls *int) []meterClient {
	out := make([]meterClient, len(c.brokers))
	count := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			*calls++
			return next(ctx, req)
		}
	})
	for i, b := range c.brokers {
		out[i] = meterClient{records: sluicev1connect.NewRecordServiceClient(h2c.Client(), "http://"+b.cfg.Advertised(),
			connect.WithInterceptors(tenants.Bearer(c.token), count)), calls: calls}
	}
	return out
}

// produceVia writes one batch of n records to the partition through
// client, which forwards it when it does not lead the partition. It
// retries while the partition moves (a loaded machine may see a broker
// miss its lease): every attempt reaches the broker and is a request of
// the tenant, and what the log holds is what ingress must bill.
func produceVia(t *testing.T, client meterClient, part int32, n int) {
	t.Helper()
	recs := make([]*sluicev1.Record, n)
	for i := range recs {
		recs[i] = &sluicev1.Record{Value: []byte(fmt.Sprintf("record-%d-of-%d", i, n))}
	}
	testenv.Wait(t, 30*time.Second, "a produce", func() error {
		_, err := client.records.Produce(context.Background(), connect.NewRequest(&sluicev1.ProduceRequest{
			Topic: "orders", Partition: part, Acks: sluicev1.Acks_ACKS_ALL,
			Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: recs}},
		}))
		return err
	})
}

// fetchAllVia reads the partition from offset 0 to its HW as raw
// batches through client and returns the batch bytes answered.
func fetchAllVia(t *testing.T, client meterClient, part int32) int64 {
	t.Helper()
	var n int64
	for off := int64(0); ; {
		var res *connect.Response[sluicev1.FetchResponse]
		testenv.Wait(t, 30*time.Second, "a fetch", func() error {
			var err error
			res, err = client.records.Fetch(context.Background(), connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: part, Offset: off, RawBatches: true, MaxBytes: 4096}))
			return err
		})
		n += int64(len(res.Msg.GetBatches().GetData()))
		if off = res.Msg.GetNextOffset(); off >= res.Msg.GetHighWatermark() {
			return n
		}
	}
}

// leaderIndex is the index of the broker leading the partition in broker
// i's view (-1: none).
func (c *lagCluster) leaderIndex(t testing.TB, i int, topic string, part int32) int {
	t.Helper()
	tm, ok := c.brokers[i].metadata().Topic(c.tenantID, topic)
	require.True(t, ok)
	return int(tm.Partitions[part].Leader) - 1
}

// TestBrokerMeterReportsExactlyOnce: on a real cluster whose control
// plane loses every third ReportUsage answer, the brokers' reports bill
// the tenant's ingress as the data batches in the leaders' logs, its
// egress as the batch bytes its fetches got and its requests as the calls
// it made (forwarded ones once), exactly; retries repeat their report,
// sequences run 1, 2, 3 per broker epoch. After the leader of a partition
// stops (its last report goes out on shutdown) the new leader meters the
// rest of the log from the cursor: the partition's billed ingress is its
// whole log's.
func TestBrokerMeterReportsExactlyOnce(t *testing.T) {
	t.Parallel()
	fake := newFakeUsage(3)
	var once sync.Once
	var proxy string
	c := startTestCluster(t, testClusterOpts{
		controlPlane: func(cfg *controlplane.Config) { cfg.BrokerLease = 2 * time.Second },
		broker: func(bc *Config) {
			once.Do(func() { proxy = serveFakeUsage(t, bc.ControlPlane, fake) })
			bc.ControlPlane = proxy
			bc.UsageReportInterval = 200 * time.Millisecond
		},
	})
	tm, ok := c.brokers[0].metadata().Topic(c.tenantID, "orders")
	require.True(t, ok)
	calls := 0
	clients := c.meterClients(&calls)

	// Every partition written and read through every broker: some calls
	// are forwarded to the leader.
	var egress int64
	for round := range 3 {
		for part := range int32(2) {
			for i := range clients {
				produceVia(t, clients[i], part, 1+round*7+i)
			}
			egress += fetchAllVia(t, clients[round%len(clients)], part)
		}
	}
	leaderOf := map[int32]int{}
	for part := range int32(2) {
		leaderOf[part] = c.leaderIndex(t, 0, "orders", part)
	}

	// billed waits until the fake billed every partition's log (as its
	// current leader holds it), the egress and the requests exactly.
	billed := func() {
		t.Helper()
		testenv.Wait(t, 60*time.Second, "usage billed exactly", func() error {
			ingress, cursors, eg, req, _, violations := fake.state()
			if len(violations) > 0 {
				return fmt.Errorf("violations: %v", violations)
			}
			for part := range int32(2) {
				want, hw := logDataBytes(t, c.brokers[leaderOf[part]], tm.ID, part)
				k := cluster.PartKey{TopicID: tm.ID, Partition: part}
				if cursors[k] != hw || ingress[k] != want {
					return fmt.Errorf("partition %d: billed [0, %d) with %d bytes; the log has %d bytes below the HW %d", part, cursors[k], ingress[k], want, hw)
				}
			}
			if eg[c.tenantID] != egress || req[c.tenantID] != int64(calls) {
				return fmt.Errorf("billed egress %d, requests %d; the tenant fetched %d bytes in %d calls", eg[c.tenantID], req[c.tenantID], egress, calls)
			}
			return nil
		})
	}
	billed()
	// A lost answer's report was applied before the answer went: its
	// retry may come after the billing is complete.
	testenv.Wait(t, 30*time.Second, "a lost answer's report sent again", func() error {
		if _, _, _, _, retries, _ := fake.state(); retries == 0 {
			return errors.New("no retry yet")
		}
		return nil
	})
	_, _, _, _, _, violations := fake.state()
	require.Empty(t, violations)

	// The leader of partition 0 stops; another takes over and takes
	// more records.
	old := leaderOf[0]
	c.stopBroker(old)
	survivor := (old + 1) % len(c.brokers)
	c.waitTopicLed(t, c.tenantID, "orders", int32(old+1))
	leaderOf[0] = c.leaderIndex(t, survivor, "orders", 0)
	leaderOf[1] = c.leaderIndex(t, survivor, "orders", 1)
	for i := range clients {
		if i != old {
			produceVia(t, clients[i], 0, 3+i)
		}
	}
	egress += fetchAllVia(t, clients[survivor], 0)
	billed()
	_, _, _, _, _, violations = fake.state()
	require.Empty(t, violations)
}

// TestBrokerMeterFinalReportOnShutdown: a broker that stops reports what
// it counted since its last report once more after its client port
// drained (here its only report: the interval is an hour), so a clean
// shutdown loses no requests; its leaderships ask for their cursors.
func TestBrokerMeterFinalReportOnShutdown(t *testing.T) {
	t.Parallel()
	fake := newFakeUsage(0)
	var once sync.Once
	var proxy string
	c := startTestCluster(t, testClusterOpts{
		broker: func(bc *Config) {
			once.Do(func() { proxy = serveFakeUsage(t, bc.ControlPlane, fake) })
			bc.ControlPlane = proxy
			bc.UsageReportInterval = time.Hour
		},
	})
	calls := 0
	clients := c.meterClients(&calls)
	for part := range int32(2) {
		produceVia(t, clients[0], part, 4)
	}
	_, _, _, req, _, _ := fake.state()
	require.Empty(t, req, "nothing reported before the interval")
	c.stopBroker(0)
	_, _, _, req, _, violations := fake.state()
	require.Empty(t, violations)
	require.Equal(t, map[string]int64{c.tenantID: int64(calls)}, req, "broker 1 counted every call it was sent")
	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.Len(t, fake.reports, 1)
	for k, r := range fake.reports {
		require.Equal(t, usageKey{1, k.epoch, 1}, k)
		for _, g := range r.GetIngress() {
			require.Equal(t, g.GetStartOffset(), g.GetEndOffset(), "a leadership without a cursor asks first")
		}
	}
}

// TestBrokerMeterIntervalFlag: --usage-report-interval defaults to 10s
// and is refused outside [100ms, 1h], naming the flag.
func TestBrokerMeterIntervalFlag(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	fs := pflag.NewFlagSet("broker", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.Equal(t, "10s", fs.Lookup("usage-report-interval").DefValue)
	cfg.BrokerToken = "broker-token-0123456789"
	require.NoError(t, cfg.Validate())
	for _, d := range []time.Duration{50 * time.Millisecond, 2 * time.Hour} {
		cfg.UsageReportInterval = d
		require.ErrorContains(t, cfg.Validate(), "--usage-report-interval")
	}
}

// losingUsageAnswers serves ReportUsage by passing it to the control
// plane at cp and losing every dropEvery-th answer after the control
// plane applied it.
type losingUsageAnswers struct {
	sluicev1connect.UnimplementedBrokerServiceHandler
	cp        sluicev1connect.BrokerServiceClient
	dropEvery int
	mu        sync.Mutex
	calls     int
	lost      int
}

func (l *losingUsageAnswers) ReportUsage(ctx context.Context, req *connect.Request[sluicev1.ReportUsageRequest]) (*connect.Response[sluicev1.ReportUsageResponse], error) {
	out := connect.NewRequest(req.Msg)
	out.Header().Set("Authorization", req.Header().Get("Authorization"))
	res, err := l.cp.ReportUsage(ctx, out)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls++; l.calls%l.dropEvery == 0 {
		l.lost++
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("answer lost"))
	}
	return connect.NewResponse(res.Msg), nil
}

// serveLosingUsage is serveFakeUsage with the real ReportUsage behind
// l.
func serveLosingUsage(t testing.TB, cp string, l *losingUsageAnswers) string {
	t.Helper()
	l.cp = sluicev1connect.NewBrokerServiceClient(h2c.Client(), cp)
	u, err := url.Parse(cp)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = h2c.Client().Transport
	rp.FlushInterval = -1
	mux := http.NewServeMux()
	_, h := sluicev1connect.NewBrokerServiceHandler(l)
	mux.Handle(sluicev1connect.BrokerServiceReportUsageProcedure, h)
	mux.Handle("/", rp)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	ln := listenLoopback(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// TestBrokerMeterBillsTheLogExactlyOnce: with the control plane's own
// ReportUsage and store, every third answer lost, and the leader of a
// partition stopped midway (another takes over and takes more records),
// the tenant's billed ingress in the store's hourly rows is the sum of
// the data batches in the partitions' logs, and its billed egress and
// requests are what it fetched and sent, exactly.
func TestBrokerMeterBillsTheLogExactlyOnce(t *testing.T) {
	t.Parallel()
	losing := &losingUsageAnswers{dropEvery: 3}
	var once sync.Once
	var proxy string
	c := startTestCluster(t, testClusterOpts{
		controlPlane: func(cfg *controlplane.Config) { cfg.BrokerLease = 2 * time.Second },
		broker: func(bc *Config) {
			once.Do(func() { proxy = serveLosingUsage(t, bc.ControlPlane, losing) })
			bc.ControlPlane = proxy
			bc.UsageReportInterval = 200 * time.Millisecond
		},
	})
	start := time.Now()
	tm, ok := c.brokers[0].metadata().Topic(c.tenantID, "orders")
	require.True(t, ok)
	calls := 0
	clients := c.meterClients(&calls)
	var egress int64
	write := func(skip int) {
		for part := range int32(2) {
			for i := range clients {
				if i != skip {
					produceVia(t, clients[i], part, 2+3*i)
				}
			}
		}
	}
	write(-1)
	egress += fetchAllVia(t, clients[1], 0)

	old := c.leaderIndex(t, 0, "orders", 0)
	c.stopBroker(old)
	survivor := (old + 1) % len(c.brokers)
	c.waitTopicLed(t, c.tenantID, "orders", int32(old+1))
	write(old)
	egress += fetchAllVia(t, clients[survivor], 1)

	billed := func() (map[store.UsageDimension]int64, error) {
		rows, err := c.cp.Store().ListUsage(context.Background(), c.tenantID, start.Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			return nil, err
		}
		out := map[store.UsageDimension]int64{}
		for _, r := range rows {
			out[r.Dimension] += r.Amount
		}
		return out, nil
	}
	testenv.Wait(t, 60*time.Second, "usage billed exactly", func() error {
		var ingress int64
		for part := range int32(2) {
			// Under load the survivor may miss a lease renewal: the
			// partition is leaderless in its view until it is back.
			li := c.leaderIndex(t, survivor, "orders", part)
			if li < 0 || li == old {
				return fmt.Errorf("partition %d led by broker index %d in broker %d's view", part, li, survivor+1)
			}
			n, _ := logDataBytes(t, c.brokers[li], tm.ID, part)
			ingress += n
		}
		got, err := billed()
		if err != nil {
			return err
		}
		want := map[store.UsageDimension]int64{store.UsageIngressBytes: ingress, store.UsageEgressBytes: egress, store.UsageRequests: int64(calls)}
		for d, n := range want {
			if got[d] != n {
				return fmt.Errorf("billed %v, want %v", got, want)
			}
		}
		return nil
	})
	testenv.Wait(t, 30*time.Second, "answers lost", func() error {
		losing.mu.Lock()
		defer losing.mu.Unlock()
		if losing.lost == 0 {
			return errors.New("none yet")
		}
		return nil
	})
}
