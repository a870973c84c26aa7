package sqlstore_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
	"github.com/sluicemq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// engines runs f on a fresh store of each engine, through the seam.
func engines(t *testing.T, f func(t *testing.T, db *sqlstore.DB)) {
	stores(t, func(t *testing.T, s *sqlstore.Store) { f(t, s.DB()) })
}

// stores runs f on a fresh store of each engine.
func stores(t *testing.T, f func(t *testing.T, s *sqlstore.Store)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s, err := postgres.Open(t.Context(), testenv.PostgresURL(t), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		f(t, s.Store)
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		f(t, s.Store)
	})
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6_789_000, time.UTC)

func insertKey(t *testing.T, db *sqlstore.DB, kid string, created time.Time) {
	t.Helper()
	// $N out of order: both engines bind by number.
	_, err := db.Write().ExecContext(t.Context(),
		`INSERT INTO signing_keys (private, kid, created_at) VALUES ($2, $1, $3)`, kid, []byte("k"), db.Time(created))
	require.NoError(t, err)
}

// TestSQLStorePlaceholders: one query text, $N placeholders, runs on both
// engines, a placeholder used twice and out of order included; times come
// back truncated to the millisecond, in UTC, NULL as zero.
func TestSQLStorePlaceholders(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, db *sqlstore.DB) {
		ctx := t.Context()
		insertKey(t, db, "a", t0)
		insertKey(t, db, "b", t0.Add(time.Hour))
		res, err := db.Write().ExecContext(ctx,
			`UPDATE signing_keys SET retired_at = $2 WHERE created_at < $2 AND kid <> $1`, "b", db.Time(t0.Add(time.Minute)))
		require.NoError(t, err)
		require.NoError(t, sqlstore.MustAffect(res, err))

		rows, err := db.Read().QueryContext(ctx, `SELECT kid, created_at, retired_at FROM signing_keys ORDER BY kid`)
		type row struct {
			kid              string
			created, retired time.Time
		}
		got, err := sqlstore.Collect(db, rows, err, func(r sqlstore.Scanner) (row, error) {
			var x row
			return x, r.Scan(&x.kid, sqlstore.ScanTime(&x.created), sqlstore.ScanTime(&x.retired))
		}, "list")
		require.NoError(t, err)
		require.Equal(t, []row{
			{"a", t0.Truncate(time.Millisecond), t0.Add(time.Minute).Truncate(time.Millisecond)},
			{"b", t0.Add(time.Hour).Truncate(time.Millisecond), time.Time{}},
		}, got)
	})
}

// TestSQLStoreIn: Dialect.In matches the members of a list parameter, and
// an empty list matches nothing.
func TestSQLStoreIn(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, db *sqlstore.DB) {
		for _, k := range []string{"a", "b", "c"} {
			insertKey(t, db, k, t0)
		}
		list := func(in []string) []string {
			rows, err := db.Read().QueryContext(t.Context(),
				`SELECT kid FROM signing_keys WHERE `+db.In("kid", "$1")+` ORDER BY kid`, db.Strings(in))
			out, err := sqlstore.Collect(db, rows, err, func(r sqlstore.Scanner) (string, error) {
				var s string
				return s, r.Scan(&s)
			}, "list")
			require.NoError(t, err)
			return out
		}
		require.Equal(t, []string{"a", "c"}, list([]string{"c", "a", "x"}))
		require.Empty(t, list(nil))
	})
}

// TestSQLStoreTx: a failed transaction leaves nothing; every Lock clause is
// valid in a write transaction; a snapshot reads; engine errors translate to
// the store's.
func TestSQLStoreTx(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, db *sqlstore.DB) {
		ctx := t.Context()
		boom := errors.New("boom")
		err := db.InTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO signing_keys (kid, private, created_at) VALUES ($1, $2, $3)`,
				"gone", []byte("k"), db.Time(t0)); err != nil {
				return err
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		var n int
		require.NoError(t, db.Read().QueryRowContext(ctx, `SELECT count(*) FROM signing_keys`).Scan(&n))
		require.Zero(t, n)

		insertKey(t, db, "a", t0)
		for _, l := range []sqlstore.Lock{sqlstore.LockShare, sqlstore.LockNoKeyUpdate, sqlstore.LockUpdate, sqlstore.LockUpdateSkipLocked} {
			require.NoError(t, db.InTx(ctx, func(tx *sql.Tx) error {
				var kid string
				return tx.QueryRowContext(ctx, `SELECT kid FROM signing_keys WHERE kid = $1`+db.Lock(l), "a").Scan(&kid)
			}), "lock %d", l)
		}
		require.NoError(t, db.InSnapshot(ctx, func(tx *sql.Tx) error {
			return tx.QueryRowContext(ctx, `SELECT count(*) FROM signing_keys`).Scan(&n)
		}))
		require.Equal(t, 1, n)

		_, err = db.Write().ExecContext(ctx, `INSERT INTO signing_keys (kid, private, created_at) VALUES ($1, $2, $3)`,
			"a", []byte("k"), db.Time(t0))
		var exists *store.AlreadyExistsError
		require.ErrorAs(t, db.Translate("insert", err), &exists)
		require.Equal(t, "signing key id", exists.What)
		require.ErrorIs(t, db.Translate("get", db.Read().QueryRowContext(ctx,
			`SELECT kid FROM signing_keys WHERE kid = $1`, "nope").Scan(new(string))), store.ErrNotFound)
	})
}

// TestSQLStoreListValues: list parameters keep elements that need quoting
// in an array literal (quotes, backslashes, commas, braces, NULL) and come
// back as written.
func TestSQLStoreListValues(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s *sqlstore.Store) {
		scopes := []string{`a"b`, `c\d`, "e,f", "{g}", "NULL", "", "h i"}
		ten := store.Tenant{ID: store.NewID(), Name: "lists", Email: "lists@example.com", Plan: "free", Status: store.TenantActive, CreatedAt: t0}
		key := store.APIKey{ID: "k_" + store.NewID(), Name: "k", Hash: []byte("h"), Scopes: scopes, CreatedAt: t0}
		require.NoError(t, s.CreateTenant(t.Context(), ten, key))
		got, err := s.GetAPIKey(t.Context(), key.ID)
		require.NoError(t, err)
		require.Equal(t, scopes, got.Scopes)
	})
}
