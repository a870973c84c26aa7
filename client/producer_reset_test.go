package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// resetter stands in for brokers that die under a call: while it is on,
// every connection the client opens to a broker is accepted, left to send
// what it sends, and reset (a TCP RST), which connect-go reports as
// Canceled although no context ended. The control plane is reached
// directly. It is a network fault, not a fake broker, and stays one: a
// running broker (and so the cluster's faults, whose DropAnswer resets
// one HTTP/2 stream) cannot reset the TCP connection under a call before
// answering its preface.
type resetter struct {
	ln     net.Listener
	on     atomic.Bool
	resets atomic.Int64
}

func newResetter(t *testing.T) *resetter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &resetter{ln: ln}
	r.on.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go r.reset(conn)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return r
}

// reset reads the client's first bytes (its connection preface and, most
// often, the request), then resets the connection.
func (r *resetter) reset(conn net.Conn) {
	buf := make([]byte, 4096)
	_, _ = conn.Read(buf)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, _ = conn.Read(buf) // the rest of what was sent: not a wait for anything
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	r.resets.Add(1)
}

// client returns a client whose connections to brokers (or, with
// controlPlane, to the control plane) go to the resetter while it is on,
// and its HTTP transport.
func (r *resetter) client(t *testing.T, controlPlane bool) (*client.Client, *http.Transport) {
	t.Helper()
	cp := strings.TrimPrefix(endpoint, "http://")
	var d net.Dialer
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if (addr == cp) == controlPlane && r.on.Load() {
			addr = r.ln.Addr().String()
		}
		return d.DialContext(ctx, network, addr)
	}}
	c, err := client.New(t.Context(), endpoint, client.APIKey(apiKey), client.WithHTTPClient(&http.Client{Transport: tr}))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, tr
}

// NewProducer keeps asking for a producer id while every broker resets its
// connections (connect-go's Canceled with a live context is a network
// failure, not the caller's cancellation), succeeds once a broker answers,
// and returns promptly with the context's error when the context ends
// first. Issue 29 item 9: it failed at the first reset, in milliseconds.
// NewTransactionalProducer, whose coordinator calls normalised the error
// already, is held to the same.
func TestProducerInitSurvivesConnectionResets(t *testing.T) {
	inits := []struct {
		name string
		init func(context.Context, *client.Client) (io.Closer, error)
	}{
		{"idempotent", func(ctx context.Context, c *client.Client) (io.Closer, error) {
			p, err := c.NewProducer(ctx)
			if err != nil {
				return nil, err
			}
			if !p.Idempotent() {
				return nil, errors.New("the producer has no producer id")
			}
			return closer(p.Close), nil
		}},
		{"transactional", func(ctx context.Context, c *client.Client) (io.Closer, error) {
			p, err := c.NewTransactionalProducer(ctx, fresh("reset-"+t.Name()))
			if err != nil {
				return nil, err
			}
			return closer(p.Close), nil
		}},
	}
	for _, tc := range inits {
		t.Run(tc.name+"/broker back", func(t *testing.T) {
			r := newResetter(t)
			c, _ := r.client(t, false)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			type result struct {
				p   io.Closer
				err error
			}
			done := make(chan result, 1)
			go func() {
				p, err := tc.init(ctx, c)
				done <- result{p, err}
			}()
			// More resets than brokers: every broker failed at least once
			// and the producer went round again.
			testenv.Wait(t, 30*time.Second, "5 connections reset", func() error {
				select {
				case res := <-done:
					done <- res
					return testenv.Permanent(fmt.Errorf("returned before the brokers came back: %v", res.err))
				default:
				}
				if n := r.resets.Load(); n < 5 {
					return fmt.Errorf("%d resets", n)
				}
				return nil
			})
			r.on.Store(false)
			res := <-done
			require.NoError(t, res.err)
			require.NoError(t, res.p.Close())
		})

		t.Run(tc.name+"/context ends", func(t *testing.T) {
			r := newResetter(t)
			c, _ := r.client(t, false)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			_, err := tc.init(ctx, c)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, time.Since(start), 5*time.Second, "returned soon after the deadline")
			require.Greater(t, r.resets.Load(), int64(3), "every broker tried, and again")
		})
	}
}

// closer adapts a producer's Close to io.Closer.
type closer func(context.Context) error

func (f closer) Close() error { return f(context.Background()) }

// marked is an HTTP transport that sets a header on every request, so
// that a fault on the package's shared cluster can tell one client's
// calls from the others'.
type marked struct {
	http.RoundTripper
	name, value string
}

func (m marked) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(m.name, m.value)
	return m.RoundTripper.RoundTrip(req)
}

// When every broker it knows fails, NewProducer learns the brokers again
// from the control plane instead of asking the same dead addresses until
// its context ends. The control plane's first answer to the client (its
// New's metadata) places every broker at an address that resets every
// connection; later answers place them where they are: brokers that came
// back at other addresses.
func TestProducerInitRelearnsMovedBrokers(t *testing.T) {
	r := newResetter(t)
	const header = "X-Sluice-Test"
	mine := func(c localcluster.Call) bool { return c.Header.Get(header) == t.Name() }
	var answers atomic.Int64
	addFault(t, localcluster.Fault{Broker: localcluster.ControlPlane, Procedure: "GetMetadata", Answer: func(c localcluster.Call, res proto.Message) {
		if !mine(c) || answers.Add(1) > 1 {
			return
		}
		for _, b := range res.(*sluicev1.GetMetadataResponse).GetBrokers() {
			b.Address = r.ln.Addr().String()
		}
	}})
	inits := addFault(t, localcluster.Fault{Procedure: "InitProducerId"})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: marked{&http.Transport{Protocols: &p}, header, t.Name()}}

	c, err := client.New(t.Context(), endpoint, client.APIKey(apiKey), client.WithHTTPClient(hc))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pr, err := c.NewProducer(ctx)
	require.NoError(t, err)
	require.True(t, pr.Idempotent())
	require.NoError(t, pr.Close(t.Context()))
	require.Positive(t, r.resets.Load(), "the dead address was asked first")
	require.Greater(t, answers.Load(), int64(1), "the brokers learnt again")
	require.Equal(t, 1, len(slices.DeleteFunc(inits.Calls(), func(c localcluster.Call) bool { return !mine(c) })), "one producer id asked for, where the brokers are")
}

// A call to the control plane over a connection it resets fails
// Unavailable, as when it cannot be reached, not Canceled, which reads as
// the caller's cancellation and is not retried: New's login, and metadata
// (the producer failed a batch for good when routing it needed such a
// refresh).
func TestClientControlPlaneResetIsUnavailable(t *testing.T) {
	r := newResetter(t)
	cp := r.ln.Addr().String()
	_, err := client.New(t.Context(), "http://"+cp, client.APIKey(apiKey))
	require.Error(t, err)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "log in: %v", err)

	r.on.Store(false)
	c, tr := r.client(t, true)
	r.on.Store(true)
	tr.CloseIdleConnections() // the next call to the control plane dials
	// Brokers do not know the topic: the control plane is asked.
	_, err = c.Partitions(t.Context(), "nowhere-"+t.Name())
	require.Error(t, err)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.Positive(t, r.resets.Load())
}
