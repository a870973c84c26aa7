package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tiered/objstore"
	"github.com/sluicemq/sluice/tiered/objstore/objstoretest"
	"github.com/sluicemq/sluice/tiered/objstore/s3"
)

// configFor is a Config for a bucket on a versitygw server.
func configFor(srv *testenv.S3Server, bucket string) s3.Config {
	cfg := s3.DefaultConfig()
	cfg.Bucket = bucket
	cfg.Region = srv.Region
	cfg.Endpoint = srv.Endpoint
	cfg.PathStyle = true
	cfg.AccessKeyID = srv.AccessKey
	cfg.SecretAccessKey = srv.SecretKey
	return cfg
}

func newStore(t *testing.T, srv *testenv.S3Server, bucket string) *s3.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := s3.New(ctx, configFor(srv, bucket))
	require.NoError(t, err)
	return s
}

func TestObjstoreS3Acceptance(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return newStore(t, srv, srv.NewBucket(t))
	})
}

// flakyProxy forwards to a real S3 server but fails the first attempt of every request with 503
// SlowDown (the SDK numbers attempts in the amz-sdk-request header), so that every operation
// succeeds only through a retry, and counts listing pages.
type flakyProxy struct {
	next          http.Handler
	injected      atomic.Int64
	continuations atomic.Int64 // ListObjectsV2 requests for a page after the first
}

func newFlakyProxy(t *testing.T, endpoint string) (*flakyProxy, string) {
	target, err := url.Parse(endpoint)
	require.NoError(t, err)
	p := &flakyProxy{next: httputil.NewSingleHostReverseProxy(target)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *flakyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("continuation-token") {
		p.continuations.Add(1)
	}
	if strings.HasPrefix(r.Header.Get("Amz-Sdk-Request"), "attempt=1;") {
		p.injected.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>injected</Message></Error>`)
		}
		return
	}
	p.next.ServeHTTP(w, r) // the Host header stays the proxy's, which the request was signed for
}

// TestObjstoreS3AcceptanceThroughRetries runs the suite with every request failing once: Puts must
// resend their whole body, ranged Gets their range, Lists their page.
func TestObjstoreS3AcceptanceThroughRetries(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	proxy, proxyURL := newFlakyProxy(t, srv.Endpoint)
	var mu sync.Mutex
	var ran []string   // subtests
	t.Cleanup(func() { // after the subtests
		mu.Lock()
		defer mu.Unlock()
		if proxy.injected.Load() < int64(len(ran)) {
			t.Errorf("%d failures injected for %d subtests", proxy.injected.Load(), len(ran))
		}
		if slices.Contains(ran, t.Name()+"/ListPagination") && proxy.continuations.Load() == 0 {
			t.Error("no listing asked for a second page")
		}
	})
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		mu.Lock()
		ran = append(ran, t.Name())
		mu.Unlock()
		cfg := configFor(srv, srv.NewBucket(t))
		cfg.Endpoint = proxyURL
		cfg.MaxBackoff = 20 * time.Millisecond
		s, err := s3.New(t.Context(), cfg)
		require.NoError(t, err)
		return s
	})
}

func TestObjstoreS3CredentialsFromTheEnvironment(t *testing.T) {
	srv := testenv.S3(t)
	isolateAWSEnv(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	cfg := configFor(srv, srv.Bucket)
	cfg.AccessKeyID, cfg.SecretAccessKey = "", ""
	s, err := s3.New(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, s.Put(t.Context(), "k", strings.NewReader("v"), 1))
}

// isolateAWSEnv hides the machine's AWS settings, and the EC2 metadata service, from the SDK.
func isolateAWSEnv(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // never ask 169.254.169.254 from a test
}

func TestObjstoreS3NewExplainsWhatIsWrong(t *testing.T) {
	srv := testenv.S3(t)
	closedPort := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		return "http://" + addr
	}()
	for _, tc := range []struct {
		name   string
		modify func(*s3.Config)
		want   []string
	}{
		{"missing bucket", func(c *s3.Config) { c.Bucket = "no-such-bucket" }, []string{`"no-such-bucket"`, "does not exist"}},
		{"wrong secret", func(c *s3.Config) { c.SecretAccessKey = "wrong" }, []string{"access denied", "credentials"}},
		{"unknown access key", func(c *s3.Config) { c.AccessKeyID = "nobody" }, []string{"access denied", "credentials"}},
		{"unreachable endpoint", func(c *s3.Config) { c.Endpoint = closedPort; c.MaxAttempts = 2 }, []string{"cannot reach", closedPort}},
		{"no bucket", func(c *s3.Config) { c.Bucket = "" }, []string{"--tier-s3-bucket is required"}},
		{"bad endpoint", func(c *s3.Config) { c.Endpoint = "127.0.0.1:9000" }, []string{"--tier-s3-endpoint must be"}},
		{"no secret", func(c *s3.Config) { c.SecretAccessKey = "" }, []string{"secret access key"}},
		{"no attempts", func(c *s3.Config) { c.MaxAttempts = 0 }, []string{"--tier-s3-max-attempts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := configFor(srv, srv.Bucket)
			tc.modify(&cfg)
			start := time.Now()
			_, err := s3.New(t.Context(), cfg)
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			require.Less(t, time.Since(start), 30*time.Second)
		})
	}

	t.Run("no credentials", func(t *testing.T) {
		isolateAWSEnv(t)
		cfg := configFor(srv, srv.Bucket)
		cfg.AccessKeyID, cfg.SecretAccessKey = "", ""
		_, err := s3.New(t.Context(), cfg)
		require.ErrorContains(t, err, "no AWS credentials")
		require.ErrorContains(t, err, "AWS_ACCESS_KEY_ID")
	})
}

// fakeS3 is an httptest server that answers every request with status (and an S3 error body),
// counting the requests.
func fakeS3(t *testing.T, status int, code string) (url string, requests *atomic.Int64) {
	requests = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodHead && r.URL.Path == "/bucket" {
			w.WriteHeader(http.StatusOK) // HeadBucket: the bucket is there
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, code)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, requests
}

func fakeStore(t *testing.T, url string, attempts int) *s3.Store {
	cfg := s3.DefaultConfig()
	cfg.Bucket = "bucket"
	cfg.Endpoint = url
	cfg.PathStyle = true
	cfg.AccessKeyID, cfg.SecretAccessKey = "k", "s"
	cfg.MaxAttempts = attempts
	cfg.MaxBackoff = 10 * time.Millisecond
	s, err := s3.New(t.Context(), cfg)
	require.NoError(t, err)
	return s
}

func TestObjstoreS3ServerErrorsAreRetriedBoundedAndNeverNotFound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusInternalServerError, "InternalError"},
		{http.StatusServiceUnavailable, "SlowDown"},
	} {
		url, requests := fakeS3(t, tc.status, tc.code)
		const attempts = 3
		s := fakeStore(t, url, attempts)
		ctx := t.Context()
		ops := map[string]func() error{
			"put": func() error { return s.Put(ctx, "k", bytes.NewReader([]byte("v")), 1) },
			"get": func() error { _, err := s.Get(ctx, "k", 0, -1); return err },
			"ranged get": func() error {
				_, err := s.Get(ctx, "k", 5, 10)
				return err
			},
			"head":   func() error { _, err := s.Head(ctx, "k"); return err },
			"delete": func() error { return s.Delete(ctx, "k") },
			"list": func() error {
				for _, err := range s.List(ctx, "") {
					return err
				}
				return nil
			},
		}
		for name, op := range ops {
			before := requests.Load()
			err := op()
			require.Error(t, err, "%s with %d answers", name, tc.status)
			require.NotErrorIs(t, err, objstore.ErrNotFound, name)
			require.Equal(t, int64(attempts), requests.Load()-before, "%s: requests sent for %d answers", name, tc.status)
		}
	}
}

func TestObjstoreS3ClientErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	url, requests := fakeS3(t, http.StatusForbidden, "AccessDenied")
	s := fakeStore(t, url, 5)
	before := requests.Load()
	err := s.Put(t.Context(), "k", strings.NewReader("v"), 1)
	require.ErrorContains(t, err, "AccessDenied")
	require.Equal(t, int64(1), requests.Load()-before)
}

func TestObjstoreS3PutRefusesObjectsOverFiveGiB(t *testing.T) {
	t.Parallel()
	url, requests := fakeS3(t, http.StatusInternalServerError, "InternalError")
	s := fakeStore(t, url, 1)
	before := requests.Load()
	err := s.Put(t.Context(), "k", strings.NewReader(""), 5<<30+1)
	require.ErrorContains(t, err, "5 GiB")
	require.Equal(t, before, requests.Load(), "nothing was sent")
}

func TestObjstoreS3ServerThatIgnoresRangesIsRefused(t *testing.T) {
	t.Parallel()
	body := []byte("0123456789")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body))) // a 200 with the whole object
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	s := fakeStore(t, srv.URL, 1)
	_, err := s.Get(t.Context(), "k", 2, 3)
	require.ErrorContains(t, err, "ignored the Range header")
	rc, err := s.Get(t.Context(), "k", 0, -1) // no range asked: fine
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Equal(t, body, got)
}
