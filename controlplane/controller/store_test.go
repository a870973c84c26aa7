package controller

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// engine is a store driver the controller's tests run against: open
// returns an empty, migrated store closed at cleanup, and its env.
type engine struct {
	name string
	open func(tb testing.TB) (store.Store, env)
}

// env is what a test may do to an engine's database besides the store.
type env struct {
	// age makes every tombstone of a deleted topic the store holds more
	// than an hour old, so that the next deletion raises the store's
	// horizon (ErrChangesPruned), as the drivers' own
	// MetadataChangesPruned tests do.
	age func(tb testing.TB)
	// dbCPU is the CPU time the database server's backends have used for
	// this store (0 for SQLite, which runs in this process).
	dbCPU func(tb testing.TB) time.Duration
}

var engines = []engine{
	{name: "postgres", open: func(tb testing.TB) (store.Store, env) {
		url := testenv.PostgresURL(tb)
		s, err := postgres.Open(tb.Context(), url, nil)
		require.NoError(tb, err)
		tb.Cleanup(func() { _ = s.Close() })
		exec := func(tb testing.TB, fn func(conn *pgx.Conn)) {
			conn, err := pgx.Connect(tb.Context(), url)
			require.NoError(tb, err)
			defer func() { _ = conn.Close(context.Background()) }()
			fn(conn)
		}
		return s, env{
			age: func(tb testing.TB) {
				exec(tb, func(conn *pgx.Conn) {
					_, err := conn.Exec(tb.Context(), `UPDATE deleted_topics SET deleted_at = deleted_at - interval '2 hours'`)
					require.NoError(tb, err)
				})
			},
			dbCPU: func(tb testing.TB) (total time.Duration) {
				exec(tb, func(conn *pgx.Conn) { total = testenv.PostgresBackendsCPU(tb, conn) })
				return total
			},
		}
	}},
	{name: "sqlite", open: func(tb testing.TB) (store.Store, env) {
		path := filepath.Join(tb.TempDir(), "cp.db")
		s, err := sqlite.Open(tb.Context(), path, nil)
		require.NoError(tb, err)
		tb.Cleanup(func() { _ = s.Close() })
		return s, env{
			age: func(tb testing.TB) {
				db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
				require.NoError(tb, err)
				defer func() { _ = db.Close() }()
				_, err = db.ExecContext(tb.Context(), `UPDATE deleted_topics SET deleted_at = deleted_at - 7200`)
				require.NoError(tb, err)
			},
			dbCPU: func(testing.TB) time.Duration { return 0 },
		}
	}},
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fixture is a store with brokers 1..3 registered, live until leaseUntil,
// and one tenant to create topics in.
type fixture struct {
	s      store.Store
	env    env
	tenant string
}

func newFixture(tb testing.TB, e engine, now time.Time, leaseUntil time.Time) *fixture {
	tb.Helper()
	ctx := tb.Context()
	s, env := e.open(tb)
	for id := int32(1); id <= 3; id++ {
		_, err := s.RegisterBroker(ctx, store.Broker{ID: id, Address: "b", LeaseExpiresAt: leaseUntil, RegisteredAt: now})
		require.NoError(tb, err)
	}
	tenantID := store.NewID()
	h := sha256.Sum256([]byte("k"))
	require.NoError(tb, s.CreateTenant(ctx,
		store.Tenant{ID: tenantID, Name: "t", Email: "t@example.com", Plan: "free", Status: store.TenantActive, Overrides: []byte(`{}`), CreatedAt: now},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: tenantID, Name: "k", Hash: h[:], Scopes: []string{"produce"}, CreatedAt: now}))
	return &fixture{s: s, env: env, tenant: tenantID}
}

// topic creates topic name with n partitions over brokers 1..3 (RF 3,
// partition i led by broker i%3+1, ISR full) and returns its id.
func (f *fixture) topic(tb testing.TB, name string, n int32, cfg func(*store.TopicConfig)) string {
	tb.Helper()
	now := t0
	tp := store.Topic{ID: store.NewID(), TenantID: f.tenant, Name: name, Partitions: n, ReplicationFactor: 3,
		Config:    store.TopicConfig{RetentionMs: -1, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2, MaxMessageBytes: 1 << 20, MinInsyncReplicas: 2, CleanupPolicy: "delete"},
		CreatedAt: now, UpdatedAt: now}
	if cfg != nil {
		cfg(&tp.Config)
	}
	parts := make([]store.Partition, n)
	for i := range n {
		r := []int32{i%3 + 1, (i+1)%3 + 1, (i+2)%3 + 1}
		parts[i] = store.Partition{TopicID: tp.ID, Partition: i, Replicas: r, Leader: r[0], ISR: r}
	}
	require.NoError(tb, f.s.CreateTopic(tb.Context(), tp, parts, store.CountLimits{}))
	return tp.ID
}

// readCounter counts the controller's reads of partition state.
type readCounter struct {
	store.Store
	listAll, changes atomic.Int32
}

func (s *readCounter) ListAllPartitions(ctx context.Context) ([]store.PartitionWithTopic, error) {
	s.listAll.Add(1)
	return s.Store.ListAllPartitions(ctx)
}

func (s *readCounter) MetadataChangesSince(ctx context.Context, since int64) (store.MetadataChanges, error) {
	s.changes.Add(1)
	return s.Store.MetadataChangesSince(ctx, since)
}

// BenchmarkControllerRound is one controller round (lease renewal and
// reconciliation) with 6,000 partitions (2,000 topics of 3, RF 3) on 3 live
// brokers: idle, nothing changed since the round before; one_change, a
// leader changed one partition's ISR (AlterPartition) since, which the
// controller has nothing to decide about. Besides the time it reports the
// CPU of this process (cpu-ns/op: the controller, and SQLite), of the
// Postgres backends (pg-cpu-ns/op) and both together as a share of one
// core at a round every 250 ms (core-%@250ms); one_change's include the
// change itself.
func BenchmarkControllerRound(b *testing.B) {
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			ctx := b.Context()
			now := t0
			f := newFixture(b, e, now, now.Add(time.Hour))
			var first string
			for i := range 2000 {
				id := f.topic(b, fmt.Sprintf("t%04d", i), 3, nil)
				if i == 0 {
					first = id
				}
			}
			c, err := New(DefaultConfig(), Deps{Store: f.s, Clock: clock.Func(func() time.Time { return now })})
			require.NoError(b, err)
			c.round(ctx)
			require.True(b, c.active)
			b.Run("idle", func(b *testing.B) {
				b.ReportAllocs()
				done := measureCPU(b, f)
				for b.Loop() {
					c.round(ctx)
				}
				done()
			})
			b.Run("one_change", func(b *testing.B) {
				ps, err := f.s.ListPartitions(ctx, first)
				require.NoError(b, err)
				p := ps[0]
				full := p.ISR
				b.ReportAllocs()
				done := measureCPU(b, f)
				for b.Loop() {
					b.StopTimer()
					// The leader drops a follower or takes it back.
					next := p
					next.PartitionEpoch++
					next.ISR = full[:2]
					if len(p.ISR) == 2 {
						next.ISR = full
					}
					require.NoError(b, f.s.UpdatePartition(ctx, next, p.PartitionEpoch))
					p = next
					b.StartTimer()
					c.round(ctx)
				}
				done()
				got, err := f.s.ListPartitions(ctx, first)
				require.NoError(b, err)
				require.Equal(b, p, got[0], "the controller changed nothing")
			})
		})
	}
}

// measureCPU starts counting CPU; the function it returns stops the timer
// and reports the CPU per round.
func measureCPU(b *testing.B, f *fixture) func() {
	cpu, db := cpuTime(), f.env.dbCPU(b)
	return func() {
		b.StopTimer()
		self := float64(cpuTime()-cpu) / float64(b.N)
		pg := float64(f.env.dbCPU(b)-db) / float64(b.N)
		b.ReportMetric(self, "cpu-ns/op")
		b.ReportMetric(pg, "pg-cpu-ns/op")
		b.ReportMetric(100*(self+pg)/float64(DefaultConfig().Interval), "core-%@250ms")
	}
}
