package testcluster

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicemq/sluice/tenants"

	"connectrpc.com/connect"
)

// pollEvery is how often Wait checks its condition.
const pollEvery = 50 * time.Millisecond

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks an error that no amount of waiting fixes: Wait fails at
// once with it.
func Permanent(err error) error { return permanentError{err} }

// Wait polls cond every 50 ms until it returns nil, and fails the test with
// the last error when timeout passes or cond returns a Permanent error.
// It is the only way this package waits for the cluster.
func Wait(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Retry(timeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Retry is Wait returning the error instead of failing the test, for use
// off the test goroutine.
func Retry(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		var pe permanentError
		if errors.As(err, &pe) {
			return pe.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		time.Sleep(pollEvery)
	}
}

// h2cClient is an HTTP/2 cleartext client with no overall timeout (calls
// carry contexts) and pings that drop connections to unresponsive peers.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:   &p,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 2 * time.Second,
			PingTimeout:     time.Second,
		},
	}}
}

// bearer sends a fixed token on every unary call.
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(tenants.Bearer(token))
}
