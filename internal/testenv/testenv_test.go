package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestMain(m *testing.M) { Main(m) }

func connect(t *testing.T, rawURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		t.Fatalf("connect %s: %v", rawURL, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// databasesExisting returns which of names exist, asked over a connection of its own.
func databasesExisting(t *testing.T, names []string) []string {
	t.Helper()
	if resolved == nil {
		t.Fatal("no server was resolved")
	}
	conn := connect(t, resolved.base.String())
	rows, err := conn.Query(context.Background(), "SELECT datname FROM pg_database WHERE datname = ANY($1) ORDER BY 1", names)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestParallelTestsGetSeparateDatabasesThatAreDroppedAfterwards(t *testing.T) {
	var (
		mu    sync.Mutex
		names = map[string]string{} // subtest -> database
		urls  []string
	)
	if !t.Run("group", func(t *testing.T) {
		for i := range 2 {
			t.Run(fmt.Sprint("db", i), func(t *testing.T) {
				t.Parallel()
				u := PostgresURL(t)
				conn := connect(t, u)
				ctx := context.Background()
				var db string
				if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(db, "sluice_test_") {
					t.Errorf("database %q lacks the sluice_test_ prefix", db)
				}
				var tables int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil {
					t.Fatal(err)
				}
				if tables != 0 {
					t.Errorf("fresh database has %d tables in public", tables)
				}
				// The same table name in both databases; each sees only its own row.
				if _, err := conn.Exec(ctx, "CREATE TABLE widgets (id int PRIMARY KEY, owner text NOT NULL)"); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, "INSERT INTO widgets VALUES (1, $1)", t.Name()); err != nil {
					t.Fatal(err)
				}
				var n int
				var owner string
				if err := conn.QueryRow(ctx, "SELECT count(*), min(owner) FROM widgets").Scan(&n, &owner); err != nil {
					t.Fatal(err)
				}
				if n != 1 || owner != t.Name() {
					t.Errorf("widgets holds %d rows, first owned by %q; want only this test's row", n, owner)
				}
				mu.Lock()
				names[t.Name()] = db
				urls = append(urls, u)
				mu.Unlock()
			})
		}
	}) {
		return
	}
	// Both subtests and their cleanups have run.
	if len(names) != 2 {
		t.Fatalf("got databases %v, want two", names)
	}
	var dbs []string
	for _, db := range names {
		dbs = append(dbs, db)
	}
	if dbs[0] == dbs[1] || urls[0] == urls[1] {
		t.Fatalf("parallel tests shared a database: %v %v", names, urls)
	}
	if left := databasesExisting(t, dbs); len(left) != 0 {
		t.Fatalf("databases %v still exist after their tests' cleanup", left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgx.Connect(ctx, urls[0])
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		t.Fatalf("connecting to a dropped database: got %v, want SQLSTATE 3D000", err)
	}
}

func TestDropForcesOutOpenConnections(t *testing.T) {
	var name string
	if !t.Run("leaky", func(t *testing.T) {
		u := PostgresURL(t)
		conn, err := pgx.Connect(context.Background(), u) // deliberately never closed
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	}) {
		return
	}
	if left := databasesExisting(t, []string{name}); len(left) != 0 {
		t.Fatalf("database %s still exists", name)
	}
}

// TestExternalServer exercises the $SLUICE_TEST_DATABASE_URL path against whatever server this
// binary uses, given as a URL with extra parameters.
func TestExternalServer(t *testing.T) {
	PostgresURL(t) // make sure a server is resolved
	base := *resolved.base
	q := base.Query()
	q.Set("application_name", "testenv-external")
	base.RawQuery = q.Encode()
	s, err := newExternal(base.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.admin.close)
	var name string
	if !t.Run("db", func(t *testing.T) {
		u, err := s.createDatabase(t)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		if parsed.Query().Get("application_name") != "testenv-external" || parsed.Host != base.Host {
			t.Errorf("URL %s lost the host or parameters of %s", u, base.String())
		}
		conn := connect(t, u)
		var app string
		if err := conn.QueryRow(context.Background(), "SELECT current_database(), current_setting('application_name')").Scan(&name, &app); err != nil {
			t.Fatal(err)
		}
		if "/"+name != parsed.Path || app != "testenv-external" {
			t.Errorf("connected to %q as %q via %s", name, app, u)
		}
	}) {
		return
	}
	if left := databasesExisting(t, []string{name}); len(left) != 0 {
		t.Fatalf("database %s still exists", name)
	}

	if _, err := newExternal("host=localhost dbname=x"); err == nil || !strings.Contains(err.Error(), EnvDatabaseURL) {
		t.Errorf("a keyword/value DSN should be refused with a hint, got %v", err)
	}
}

func TestNoPostgresMessage(t *testing.T) {
	t.Setenv(EnvDatabaseURL, "")
	t.Setenv("PATH", t.TempDir()) // no initdb, no apt-get, no docker
	saved := binGlobs
	binGlobs = nil
	t.Cleanup(func() { binGlobs = saved })
	s, _, err := resolve()
	if s != nil || err == nil || err.Error() != msgNoPostgres {
		t.Fatalf("resolve() = %v, %v; want the no-Postgres message", s, err)
	}
}

func TestDatabaseURL(t *testing.T) {
	for _, tc := range []struct{ base, want string }{
		{"postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/sluice_test_x?sslmode=disable"},
		{"postgresql://h", "postgresql://h/sluice_test_x"},
		{"postgres://h/a?dbname=other&sslmode=require", "postgres://h/sluice_test_x?sslmode=require"},
	} {
		u, err := url.Parse(tc.base)
		if err != nil {
			t.Fatal(err)
		}
		if got := databaseURL(u, "sluice_test_x"); got != tc.want {
			t.Errorf("databaseURL(%s) = %s, want %s", tc.base, got, tc.want)
		}
	}
}

func TestVersions(t *testing.T) {
	if got := versionFromOutput("postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n"); got != "15.18" {
		t.Errorf("versionFromOutput = %q", got)
	}
	if got := versionFromOutput("postgres (PostgreSQL) 17beta1\n"); got != "17beta1" {
		t.Errorf("versionFromOutput = %q", got)
	}
	if got := dirVersion("/usr/lib/postgresql/9.6/bin"); compareVersions(got, []int{9, 6}) != 0 {
		t.Errorf("dirVersion = %v", got)
	}
	if got := dirVersion("/usr/pgsql-16/bin"); compareVersions(got, []int{16}) != 0 {
		t.Errorf("dirVersion = %v", got)
	}
	if compareVersions([]int{15}, []int{9, 6}) <= 0 {
		t.Error("15 should sort above 9.6")
	}
}
