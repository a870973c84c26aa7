package alerting_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/controlplane/alerting"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// lagBroker answers ListGroupLags as a broker coordinating every group of
// the benchmark would: one lag per group × partition, computed at *at.
type lagBroker struct {
	sluicev1connect.UnimplementedReplicaServiceHandler
	lags []*sluicev1.GroupPartitionLag
	at   atomic.Pointer[time.Time]
	// stopped: keys whose consumer stopped at stoppedAt (lag age grows
	// 1 s/s); the others are caught up.
	stopped   map[int]bool
	stoppedAt time.Time
}

func (b *lagBroker) ListGroupLags(context.Context, *connect.Request[sluicev1.ListGroupLagsRequest]) (*connect.Response[sluicev1.ListGroupLagsResponse], error) {
	at := *b.at.Load()
	for i, l := range b.lags {
		l.HighWatermark = 1_000_000 + at.Unix()
		l.CommittedOffset, l.LagMessages, l.LagAgeMs = l.HighWatermark, 0, 0
		if b.stopped[i] {
			l.CommittedOffset = 1_000_000 + b.stoppedAt.Unix()
			l.LagMessages = l.HighWatermark - l.CommittedOffset
			l.LagAgeMs = at.Sub(b.stoppedAt).Milliseconds()
		}
	}
	return connect.NewResponse(&sluicev1.ListGroupLagsResponse{Lags: b.lags, ComputeTime: timestamppb.New(at)}), nil
}

// BenchmarkLagRound is one lag-sampling round of the control plane (Sample
// then Evaluate, as Alerter.Run does every --lag-sample-interval) over
// 2000 groups × 3 partitions on a real Postgres, with an hour of history
// (a sample every 30 s) for every group × partition and 10 % of the groups
// stopped (so they hold active alerts). It reports the CPU of this process
// (cpu-ns/op), of the database's backends (pg-cpu-ns/op) and both together
// as a share of one core at the default 30 s interval (core-%@30s).
// SLUICE_BENCH_LAG_GROUPS changes the number of groups.
func BenchmarkLagRound(b *testing.B) {
	groups := 2000
	if v := os.Getenv("SLUICE_BENCH_LAG_GROUPS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		groups = n
	}
	const (
		tenantsN   = 100
		partitions = 3
		interval   = 30 * time.Second
		window     = time.Hour
	)
	ctx := b.Context()
	url := testenv.PostgresURL(b)
	st, err := postgres.Open(ctx, url, nil)
	require.NoError(b, err)
	defer st.Close()

	// 100 tenants, each with one topic of 3 partitions read by groups/100 groups.
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	br := &lagBroker{stopped: map[int]bool{}, stoppedAt: start.Add(-90 * time.Minute)}
	for t := range tenantsN {
		id := store.NewID()
		h := sha256.Sum256([]byte(id))
		require.NoError(b, st.CreateTenant(ctx, store.Tenant{ID: id, Name: "t-" + id, Email: id + "@example.com", Plan: "free", Status: store.TenantActive},
			store.APIKey{ID: "k_" + store.NewID(), TenantID: id, Name: "first", Hash: h[:], Scopes: []string{"consume"}}))
		tp := store.Topic{ID: store.NewID(), TenantID: id, Name: "orders", Partitions: partitions, ReplicationFactor: 1,
			Config: store.TopicConfig{RetentionMs: (2 * time.Hour).Milliseconds(), RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2,
				MaxMessageBytes: 1 << 20, MinInsyncReplicas: 1, CleanupPolicy: "delete"}}
		parts := make([]store.Partition, partitions)
		for p := range parts {
			parts[p] = store.Partition{TopicID: tp.ID, Partition: int32(p), Replicas: []int32{1}, Leader: 1, ISR: []int32{1}}
		}
		require.NoError(b, st.CreateTopic(ctx, tp, parts, store.CountLimits{}))
		for g := range groups / tenantsN {
			for p := range partitions {
				if g%10 == 0 {
					br.stopped[len(br.lags)] = true
				}
				br.lags = append(br.lags, &sluicev1.GroupPartitionLag{TenantId: id, Group: fmt.Sprintf("group-%d-%d", t, g),
					TopicId: tp.ID, Topic: tp.Name, Partition: int32(p)})
			}
		}
	}

	mux := http.NewServeMux()
	// Uncompressed: a real broker compresses in its own process, and this
	// process's CPU is to be the control plane's.
	mux.Handle(sluicev1connect.NewReplicaServiceHandler(br, connect.WithCompressMinBytes(math.MaxInt)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	_, err = st.RegisterBroker(ctx, store.Broker{ID: 1, Address: strings.TrimPrefix(srv.URL, "http://"), LeaseExpiresAt: start.Add(1000 * time.Hour)})
	require.NoError(b, err)

	now := start.Add(-window)
	a := alerting.New(st, alerting.Config{SampleInterval: interval, Window: window, HTTP: hc, Clock: clock.Func(func() time.Time { return now })})
	round := func() {
		now = now.Add(interval)
		at := now.Add(-time.Second) // the broker computed a second ago
		br.at.Store(&at)
		if err := a.Sample(ctx); err != nil {
			b.Fatal(err)
		}
		if err := a.Evaluate(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// An hour of history, stored as a round would, then one round to settle the alerts.
	for now.Before(start) {
		now = now.Add(interval)
		at := now.Add(-time.Second)
		br.at.Store(&at)
		require.NoError(b, a.Sample(ctx))
	}
	round()
	active, err := st.ListActiveAlerts(ctx)
	require.NoError(b, err)
	require.NotEmpty(b, active, "the stopped groups hold alerts")

	conn, err := pgx.Connect(ctx, url)
	require.NoError(b, err)
	defer conn.Close(context.Background())
	cpu, pg := cpuTime(), testenv.PostgresBackendsCPU(b, conn)
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.StopTimer()
	self := float64(cpuTime()-cpu) / float64(b.N)
	db := float64(testenv.PostgresBackendsCPU(b, conn)-pg) / float64(b.N)
	b.ReportMetric(self, "cpu-ns/op")
	b.ReportMetric(db, "pg-cpu-ns/op")
	b.ReportMetric(100*(self+db)/float64(interval), "core-%@30s")
	b.ReportMetric(float64(len(br.lags)), "keys")
	b.ReportMetric(float64(len(active)), "active-alerts")
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
