package postgres

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a store.Store on a Postgres database. Create it with Open.
type Store struct {
	*sqlstore.Store // the methods written once, over db
	pool            *pgxpool.Pool
	db              *sql.DB // database/sql over pool
	logger          *slog.Logger
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or DSN; pool
// settings such as pool_max_conns are honoured), applies the pending
// migrations and returns the store. Several processes may Open one database
// at once. The caller closes the store.
func Open(ctx context.Context, url string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	if err := migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, err
	}
	return newStore(pool, logger), nil
}

// newStore is the Store over pool: sqlstore's DB reads and writes through
// database/sql over the pool (stdlib.OpenDBFromPool), with one pool for both.
// database/sql keeps its connections idle rather than handing each back to
// the pool after every statement (OpenDBFromPool's default, for sharing the
// pool with pgx callers, which this store has none of): a statement then
// costs no acquire, release and connection wrapper. It opens at most the
// pool's size, so it never waits on the pool.
func newStore(pool *pgxpool.Pool, logger *slog.Logger) *Store {
	db := stdlib.OpenDBFromPool(pool)
	n := int(pool.Config().MaxConns)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return &Store{
		Store: sqlstore.NewStore(sqlstore.New(sqlstore.Config{
			Dialect:  dialect{},
			Read:     db,
			Write:    db,
			Snapshot: &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
		})),
		pool:   pool,
		db:     db,
		logger: logger,
	}
}

// migrate applies the embedded migrations, holding goose's session advisory
// lock (retried every second, for up to five minutes).
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool) // closing db leaves the pool open
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(results) == 0 {
		return nil
	}
	var took time.Duration
	for _, r := range results {
		took += r.Duration
		logger.Debug("applied store migration", "driver", "postgres", "version", r.Source.Version, "duration", r.Duration)
	}
	logger.Info("applied store migrations", "driver", "postgres", "migrations", len(results),
		"from_version", results[0].Source.Version, "to_version", results[len(results)-1].Source.Version, "took", took)
	return nil
}

// Close closes the connection pool, waiting for acquired connections.
func (s *Store) Close() error {
	err := s.db.Close()
	s.pool.Close()
	return err
}
