package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/clientlimit"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// heldKeys is the real store with its API-key lookups held while hold is
// in force: every key check in flight at once, as a slow database or a
// burst of logins makes them.
type heldKeys struct {
	store.Store
	mu      sync.Mutex
	release chan struct{} // closed: lookups go through
	inside  atomic.Int64  // lookups in progress
	most    atomic.Int64  // the most in progress at once
	calls   atomic.Int64
}

// hold holds the lookups from now until the returned function is called.
func (h *heldKeys) hold() (release func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	h.release = ch
	h.mu.Unlock()
	return func() { close(ch) }
}

func (h *heldKeys) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	h.calls.Add(1)
	n := h.inside.Add(1)
	defer h.inside.Add(-1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	h.mu.Lock()
	release := h.release
	h.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return store.APIKey{}, ctx.Err()
		}
	}
	return h.Store.GetAPIKey(ctx, id)
}

// serveAuth serves the API on loopback over h2c with the given bad-key
// limit and loopback as a trusted proxy (so X-Forwarded-For picks the
// client address), on a real SQLite store behind held, and returns an
// AuthService client and a good API key.
func serveAuth(t *testing.T, limit clientlimit.Limit, held *heldKeys) (sluicev1connect.AuthServiceClient, string) {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, t.TempDir()+"/cp.db", nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	held.Store = st
	sk, err := tenants.GenerateSigningKey(time.Now())
	require.NoError(t, err)
	issuer := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	issuer.SetKeys([]tenants.SigningKey{sk})
	a := New(Config{ClientLimits: clientlimit.Config{
		Signup: clientlimit.Limit{Burst: 10, Every: time.Millisecond}, TokenFailures: limit,
		MaxAddresses: 1000, TrustedProxies: []string{"127.0.0.1/32"},
	}}, Deps{Store: held, Issuer: issuer})

	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewTenantServiceHandler(&tenantService{a}, a.HandlerOptions()...))
	mux.Handle(sluicev1connect.NewAuthServiceHandler(&authService{a}, a.HandlerOptions()...))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	url := "http://" + ln.Addr().String()

	su, err := sluicev1connect.NewTenantServiceClient(hc, url).Signup(ctx, connect.NewRequest(&sluicev1.SignupRequest{Email: "keys@example.com", TenantName: "keys"}))
	require.NoError(t, err)
	return sluicev1connect.NewAuthServiceClient(hc, url), su.Msg.GetApiKeySecret()
}

// createTokenFrom calls CreateToken as the client at addr.
func createTokenFrom(ctx context.Context, auth sluicev1connect.AuthServiceClient, addr, key string) error {
	req := connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: key})
	req.Header().Set("X-Forwarded-For", addr)
	_, err := auth.CreateToken(ctx, req)
	return err
}

// Issue 29 item 11: only bad keys count against an address's bad-key limit,
// however many calls are in flight. 100 concurrent logins with a good key
// from one address all succeed while 20 (the allowance) are being checked
// at once; before, every call beyond the 20 in flight was refused with
// "too many CreateToken calls with a bad API key". A burst of 100
// concurrent bad keys still has only the allowance checked and the rest
// refused unchecked, after which the address is refused even a good key.
func TestCreateTokenBadKeyLimitCountsOnlyBadKeys(t *testing.T) {
	t.Parallel()
	const allowance, burst = 20, 100
	held := &heldKeys{}
	auth, good := serveAuth(t, clientlimit.Limit{Burst: allowance, Every: time.Hour}, held)
	ctx := t.Context()

	// concurrently makes burst calls from addr at once with the lookups
	// held until every call started and the allowance's checks are in the
	// store, and then while during runs (if set). It returns their errors.
	concurrently := func(addr string, keys []string, during func(answered func() []error)) []error {
		release := held.hold()
		var started atomic.Int64
		var mu sync.Mutex
		var errs []error // in the order answered
		answered := func() []error {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(errs)
		}
		var wg sync.WaitGroup
		for i := range burst {
			wg.Go(func() {
				started.Add(1)
				err := createTokenFrom(ctx, auth, addr, keys[i])
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		testenv.Wait(t, 30*time.Second, "all calls started, the allowance's checks in the store", func() error {
			if n, in := started.Load(), held.inside.Load(); n < burst || in < allowance {
				return fmt.Errorf("%d started, %d in the store", n, in)
			}
			return nil
		})
		if during != nil {
			during(answered)
		}
		release()
		wg.Wait()
		return errs
	}

	// Good keys: while the first 20 are checked, none of the other 80 is
	// answered (refused); they wait for a check to end, and all succeed.
	goods := make([]string, burst)
	for i := range goods {
		goods[i] = good
	}
	errs := concurrently("203.0.113.9", goods, func(answered func() []error) {
		testenv.Consistently(t, time.Second, "no call answered while the lookups are held", func() error {
			if errs := answered(); len(errs) > 0 {
				return fmt.Errorf("%d of %d calls with a good key answered: %v", len(errs), burst, errors.Join(errs...))
			}
			return nil
		})
	})
	require.Len(t, errs, burst)
	for i, err := range errs {
		require.NoError(t, err, "call %d with a good key", i)
	}
	require.LessOrEqual(t, held.most.Load(), int64(allowance), "key checks in flight at once are bounded by the allowance")

	// Bad keys, well formed so that each would be looked up: the
	// allowance is checked, the rest refused without a lookup.
	lookups := held.calls.Load()
	bad := make([]string, burst)
	for i := range bad {
		k, err := tenants.GenerateAPIKey()
		require.NoError(t, err)
		bad[i] = k.Secret
	}
	count := map[connect.Code]int{}
	for _, err := range concurrently("198.51.100.4", bad, nil) {
		count[connect.CodeOf(err)]++
	}
	require.Equal(t, map[connect.Code]int{connect.CodeUnauthenticated: allowance, connect.CodeResourceExhausted: burst - allowance}, count)
	require.Equal(t, int64(allowance), held.calls.Load()-lookups, "only the allowance of guesses was looked up")
	err := createTokenFrom(ctx, auth, "198.51.100.4", good)
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "out of bad-key calls, the address is refused a good key too (a guess cannot be tested): %v", err)
	require.ErrorContains(t, err, "too many CreateToken calls with a bad API key")
	require.NoError(t, createTokenFrom(ctx, auth, "203.0.113.9", good), "another address is not affected")
}

// keyChecks directly: a call waiting for a reservation leaves the line
// when its context ends; a good key's reservation goes to the next in line;
// once bad keys spent the allowance and nothing runs, calls are refused
// with the bucket's delay; nothing is kept for an idle address.
func TestKeyChecksWaitersAndRefusals(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	k := newKeyChecks(clientlimit.NewLimiter(clientlimit.Limit{Burst: 2, Every: time.Minute}, 1000), func() time.Time { return now })
	ctx := t.Context()
	waiting := func(n int) func() error {
		return func() error {
			k.mu.Lock()
			defer k.mu.Unlock()
			if a := k.addrs["a"]; a == nil || len(a.waiting) != n {
				return fmt.Errorf("not %d waiting", n)
			}
			return nil
		}
	}
	type begun struct {
		settle func(bool)
		wait   time.Duration
		err    error
	}
	begin := func(ctx context.Context) <-chan begun {
		ch := make(chan begun, 1)
		go func() {
			s, w, err := k.begin(ctx, "a")
			ch <- begun{s, w, err}
		}()
		return ch
	}

	first, second := <-begin(ctx), <-begin(ctx)
	require.NotNil(t, first.settle)
	require.NotNil(t, second.settle)
	third := begin(ctx)
	testenv.Wait(t, 10*time.Second, "the third in line", waiting(1))
	cctx, cancel := context.WithCancel(ctx)
	fourth := begin(cctx)
	testenv.Wait(t, 10*time.Second, "the fourth in line", waiting(2))
	cancel()
	res := <-fourth
	require.ErrorIs(t, res.err, context.Canceled)
	require.Nil(t, res.settle)
	require.NoError(t, waiting(1)())

	first.settle(false) // a good key: its reservation goes to the third
	res = <-third
	require.NoError(t, res.err)
	require.NotNil(t, res.settle)
	second.settle(true)
	res.settle(true)
	refused := <-begin(ctx)
	require.NoError(t, refused.err)
	require.Nil(t, refused.settle, "both calls spent on bad keys, none running: refused")
	require.Equal(t, time.Minute, refused.wait)
	k.mu.Lock()
	require.Empty(t, k.addrs, "nothing kept for an address with nothing running or waiting")
	k.mu.Unlock()
}
