package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDatabaseURL names the environment variable that points tests at an existing server.
const EnvDatabaseURL = "SLUICE_TEST_DATABASE_URL"

const (
	msgNoPostgres = "no Postgres for tests: set " + EnvDatabaseURL + "=postgres://... or install PostgreSQL " +
		"(apt-get install postgresql) so initdb/postgres are on PATH, or start a Docker engine"

	// How long a CREATE DATABASE or DROP DATABASE may take.
	ddlTimeout = 2 * time.Minute
)

var (
	mainCalled atomic.Bool

	resolveOnce sync.Once
	resolved    *server
	resolveErr  error
	resolveNote string // said (t.Log) by the test that caused the resolution

	shutdownOnce sync.Once
)

// server is where per-test databases are made.
type server struct {
	base    *url.URL      // URL of the server's maintenance database; per-test URLs differ only in the path
	admin   *adminConn    // serialized connection used for CREATE/DROP DATABASE
	cluster *localCluster // nil unless this binary started the server
	stop    func()        // removes a container this binary started; nil otherwise
}

// Main runs the test binary's tests and tears down any cluster started for it. Use as:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// The cluster is also stopped, and its directory removed, when the process gets SIGINT or SIGTERM.
func Main(m *testing.M) {
	mainCalled.Store(true)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		shutdown()
		// Die of the same signal, as we would have without the handler.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		if p, err := os.FindProcess(os.Getpid()); err == nil && p.Signal(sig) == nil {
			time.Sleep(5 * time.Second) // the signal is on its way; this is only a fallback
		}
		os.Exit(2)
	}()
	code := m.Run()
	signal.Stop(sigs)
	shutdown()
	os.Exit(code)
}

// DefaultParallel makes n the number of the binary's parallel tests that
// run at once, unless -test.parallel was given or GOMAXPROCS (its
// default) is larger. Call it from TestMain, before Main (or m.Run). For
// tests that mostly wait rather than compute: on processes of their own
// (e2e clusters, whose CPU use GOMAXPROCS does not bound), or on
// in-process clusters' replication, timers and loops.
func DefaultParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && n > runtime.GOMAXPROCS(0) {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}

// shutdown closes the admin connection and stops the cluster this binary started, if any.
func shutdown() {
	shutdownOnce.Do(func() {
		// Waits for a resolution in flight (it may be starting a cluster), and blocks later ones.
		resolveOnce.Do(func() { resolveErr = errors.New("testenv: shut down") })
		s := resolved
		if s == nil {
			return
		}
		// Stop first: that also ends a DDL statement in flight that holds the admin connection.
		if s.cluster != nil {
			s.cluster.stop()
		}
		if s.stop != nil {
			s.stop()
		}
		s.admin.close()
	})
}

// PostgresURL returns the connection URL (postgres://...) of a fresh, empty database created for
// this test and dropped (WITH (FORCE)) in t.Cleanup. The cluster is started lazily once per test
// binary. It fails the test (t.Fatal) with a message that says how to provide Postgres when none
// can be had. It never skips. It is safe to call from parallel tests.
func PostgresURL(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("testenv.PostgresURL needs this package's TestMain to run testenv.Main, so that the cluster " +
			"is torn down: func TestMain(m *testing.M) { testenv.Main(m) }")
	}
	first := false
	resolveOnce.Do(func() {
		first = true
		resolved, resolveNote, resolveErr = resolve()
	})
	if resolveErr != nil {
		t.Fatal(resolveErr)
	}
	if first && resolveNote != "" {
		t.Log(resolveNote)
	}
	u, err := resolved.createDatabase(t)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// createDatabase makes a new empty database and registers its drop with t.Cleanup.
func (s *server) createDatabase(t testing.TB) (string, error) {
	t.Helper()
	name := "sluice_test_" + randomHex(8)
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
	defer cancel()
	// template0 is always empty and never has sessions, so creating from it never fails with
	// "source database is being accessed by other users".
	if err := s.admin.exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"); err != nil {
		return "", fmt.Errorf("testenv: create database %s on %s: %w", name, s.base.Redacted(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ddlTimeout)
		defer cancel()
		if err := s.admin.exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s on %s: %v", name, s.base.Redacted(), err)
		}
	})
	return databaseURL(s.base, name), nil
}

// databaseURL returns base with its database replaced by name.
func databaseURL(base *url.URL, name string) string {
	u := *base
	u.Path = "/" + name
	u.RawPath = ""
	if q := u.Query(); q.Has("dbname") { // libpq lets a dbname parameter override the path
		q.Del("dbname")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// resolve finds or starts the server, in the order of the package documentation. The note says
// what was chosen and how long it took.
func resolve() (*server, string, error) {
	start := time.Now()
	if raw := os.Getenv(EnvDatabaseURL); raw != "" {
		s, err := newExternal(raw)
		if err != nil {
			return nil, "", err
		}
		return s, fmt.Sprintf("testenv: using %s=%s", EnvDatabaseURL, s.base.Redacted()), nil
	}

	bin, findNote, err := findOrInstallBinaries()
	if err != nil {
		return nil, "", err
	}
	if bin != nil {
		c, err := startLocalCluster(bin)
		if err != nil {
			return nil, "", fmt.Errorf("testenv: could not start a throwaway PostgreSQL from %s: %w\n"+
				"(set %s=postgres://... to use another server)", bin.dir, err, EnvDatabaseURL)
		}
		base := c.url("postgres")
		s := &server{base: base, admin: &adminConn{url: base.String()}, cluster: c}
		return s, fmt.Sprintf("testenv: started PostgreSQL %s at %s in %s (%s; dir %s)",
			bin.version, base.Host, time.Since(start).Round(time.Millisecond), c.timing, c.root), nil
	}

	if dockerAnswers() {
		base, stop, err := startContainer()
		if err != nil {
			return nil, "", err
		}
		s := &server{base: base, admin: &adminConn{url: base.String()}, stop: stop}
		return s, fmt.Sprintf("testenv: started PostgreSQL container %s at %s in %s",
			containerImage, base.Host, time.Since(start).Round(time.Millisecond)), nil
	}
	msg := msgNoPostgres
	if findNote != "" {
		msg += "\n" + findNote
	}
	return nil, "", errors.New(msg)
}

// newExternal uses the server at rawURL. It checks now that the server answers.
func newExternal(rawURL string) (*server, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || u.Host == "" {
		return nil, fmt.Errorf("testenv: %s must be a URL like postgres://user:password@host:5432/postgres", EnvDatabaseURL)
	}
	s := &server{base: u, admin: &adminConn{url: rawURL}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.admin.exec(ctx, "SELECT 1"); err != nil {
		return nil, fmt.Errorf("testenv: %s=%s: cannot connect: %w", EnvDatabaseURL, u.Redacted(), err)
	}
	return s, nil
}

// dockerAnswers reports whether `docker info` succeeds.
func dockerAnswers() bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info").Run() == nil
}

// adminConn is one connection, used by one goroutine at a time, for database DDL.
type adminConn struct {
	url  string
	mu   sync.Mutex
	conn *pgx.Conn
}

func (a *adminConn) exec(ctx context.Context, sql string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if a.conn == nil || a.conn.IsClosed() {
			c, err := pgx.Connect(ctx, a.url)
			if err != nil {
				return err
			}
			a.conn = c
		}
		_, err := a.conn.Exec(ctx, sql)
		if err != nil && attempt == 0 && a.conn.IsClosed() && ctx.Err() == nil {
			a.conn = nil // the connection broke (e.g. the server restarted): reconnect once
			continue
		}
		return err
	}
}

func (a *adminConn) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.conn.Close(ctx)
		a.conn = nil
	}
}
