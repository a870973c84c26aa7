package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// busyTimeout is how long a connection waits for another process's write lock.
const busyTimeout = 10 * time.Second

// Store is a store.Store on one SQLite file. Create it with Open.
type Store struct {
	*sqlstore.Store         // the methods written once, over write and read
	write           *sql.DB // one connection; BEGIN IMMEDIATE
	read            *sql.DB // query-only connections
	logger          *slog.Logger
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite database at path, applies the
// pending migrations, and returns the store. path is a file path; it may not
// contain '?'. The caller closes the store.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') || path == ":memory:" {
		return nil, fmt.Errorf("open sqlite store: invalid path %q (need a file path without '?')", path)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := privateFile(path, logger); err != nil {
		return nil, err
	}
	// synchronous(FULL): a committed transaction survives an OS crash too;
	// metadata writes are rare, so the extra fsync costs little.
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)", busyTimeout.Milliseconds())

	write, err := sql.Open("sqlite", path+"?"+common+"&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	if err := write.PingContext(ctx); err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	if err := migrate(ctx, write, logger); err != nil {
		_ = write.Close()
		return nil, err
	}

	read, err := sql.Open("sqlite", path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n)
	if err := read.PingContext(ctx); err != nil {
		_ = read.Close()
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return &Store{
		Store:  sqlstore.NewStore(sqlstore.New(sqlstore.Config{Dialect: dialect{}, Read: read, Write: write, SingleWriter: true})),
		write:  write,
		read:   read,
		logger: logger,
	}, nil
}

// privateFile creates the database file with mode 0600, or tightens an
// existing one: it holds JWT signing keys and API key hashes. SQLite creates
// its -wal and -shm files with the database file's mode.
func privateFile(path string, logger *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		logger.Warn("sqlite store was readable by others; setting mode 0600", "path", path, "mode", fi.Mode().Perm().String())
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("chmod sqlite store %s: %w", path, err)
		}
	}
	return nil
}

func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger) error {
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys, goose.WithDisableGlobalRegistry(true))
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
		logger.Debug("applied store migration", "driver", "sqlite", "version", r.Source.Version, "duration", r.Duration)
	}
	logger.Info("applied store migrations", "driver", "sqlite", "migrations", len(results),
		"from_version", results[0].Source.Version, "to_version", results[len(results)-1].Source.Version, "took", took)
	return nil
}

// Close closes both pools.
func (s *Store) Close() error {
	return errors.Join(s.read.Close(), s.write.Close())
}
