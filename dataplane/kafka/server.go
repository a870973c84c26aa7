package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/admission"
	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/tenants"
)

// Authenticator verifies tenants' credentials as the Connect path does
// (dataplane/access.Authenticator).
type Authenticator interface {
	// Tenant verifies a Sluice token and refuses it when its API key is
	// revoked or its tenant suspended.
	Tenant(ctx context.Context, token string) (tenants.Principal, error)
	// Current refuses a principal verified before whose key was revoked,
	// or whose tenant was suspended, since.
	Current(p tenants.Principal) error
}

// Token is a Sluice token an API key was exchanged for.
type Token struct {
	Token      string
	TenantID   string
	TenantName string
	Expires    time.Time
}

// Exchange trades an API key for a token at the control plane
// (AuthService.CreateToken) on behalf of the client at clientAddr; its
// errors are domain errors (AuthenticationFailed for a bad key).
type Exchange func(ctx context.Context, apiKey, clientAddr string) (Token, error)

// Deps are what the listener needs of its broker.
type Deps struct {
	// BrokerID is this broker's id.
	BrokerID int32
	// ClusterID is what Metadata and DescribeCluster answer as the
	// cluster's id.
	ClusterID string
	// Records is the record path the requests are served by.
	Records *records.Service
	// View is the broker's current cluster view.
	View func() *cluster.View
	// Auth verifies tokens (OAUTHBEARER) and sessions.
	Auth Authenticator
	// Exchange trades the API keys of SASL PLAIN for tokens.
	Exchange Exchange
	// AdmitCall decides a request of a tenant against its request quota
	// before it is served, as the Connect path's gate does; its refusal
	// is a domain error with the retry delay.
	AdmitCall func(ctx context.Context, c admission.Call) error
	// Admin serves the topic administration requests; nil refuses them.
	Admin Admin
	// Groups serves the consumer-group requests.
	Groups Groups
	// Txns serves the transaction requests.
	Txns Txns
	// MaxRequestBytes bounds a request frame after authentication;
	// before it, 512 KiB.
	MaxRequestBytes int
	// IdleTimeout closes a connection with no request for this long (10
	// minutes when 0, as Kafka's connections.max.idle.ms); one that has
	// not authenticated, after preAuthIdle.
	IdleTimeout time.Duration
	// MaxConnections bounds the open connections (10,000 when 0): one
	// over it is closed at once.
	MaxConnections int
	Logger         *slog.Logger
	// Registerer, when set, gets the listener's metrics.
	Registerer prometheus.Registerer
}

// Server serves the Kafka protocol on the listeners given to Serve.
type Server struct {
	d       Deps
	logger  *slog.Logger
	metrics *metrics
	tokens  tokenCache

	// preAuthIdle is how long a connection may take to send each request
	// before it authenticated (the preAuthIdle constant; tests shorten it).
	preAuthIdle time.Duration

	mu    sync.Mutex
	conns map[*conn]struct{}
}

// New returns a Server over d, registering its metrics on d.Registerer.
func New(d Deps) *Server {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.IdleTimeout <= 0 {
		d.IdleTimeout = 10 * time.Minute
	}
	if d.MaxRequestBytes <= 0 {
		d.MaxRequestBytes = 100 << 20
	}
	if d.MaxConnections <= 0 {
		d.MaxConnections = 10000
	}
	return &Server{d: d, logger: d.Logger.With("listener", "kafka"), metrics: newMetrics(d.Registerer),
		preAuthIdle: preAuthIdle, conns: map[*conn]struct{}{}}
}

// preAuthMaxBytes bounds a request before the connection authenticated
// (Kafka's sasl.server.max.receive.size); preAuthIdle is how long a
// connection may take to send each request before it authenticated.
const (
	preAuthMaxBytes = 512 << 10
	preAuthIdle     = 30 * time.Second
)

// readSpec is what the reader may read next: a frame of at most limit
// bytes, arriving within idle.
type readSpec struct {
	limit int
	idle  time.Duration
}

// Serve accepts connections on ln until ctx ends or ln fails, and serves
// each on goroutines of its own; when ctx ends it closes ln and every
// connection and waits for their goroutines.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer func() {
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		wg.Wait()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
		s.mu.Lock()
		full := len(s.conns) >= s.d.MaxConnections
		if !full {
			s.conns[c] = struct{}{}
		}
		s.mu.Unlock()
		if full {
			s.metrics.request(-1, 0, "too_many_connections")
			nc.Close()
			continue
		}
		s.metrics.connections.Inc()
		wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				s.metrics.connections.Dec()
				c.close()
			}()
			c.serve(ctx)
		})
	}
}

// frame is one request as read: its bytes after the size.
type frame struct {
	body []byte
	err  error
}

// conn is one client connection: a reader goroutine reads frames ahead
// (one at most waits), and serve handles them in order and writes their
// answers in order, as Kafka requires of a connection. A request is
// handled once the one before it is done, except after a Produce whose
// batches are all appended (records.ProduceManyRequest.Appended): the
// next Produce is handled while it waits for its acknowledgements (so
// its appends still come after), up to maxPipelined at once; any other
// request waits until every Produce before it is answered.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string

	sess session // the authentication state (sasl.go)

	closeOnce sync.Once
}

// maxPipelined bounds the requests of one connection handled at once:
// produces waiting for their acknowledgements and the one being handled
// (as a Kafka producer's max.in.flight.requests.per.connection, 5 by
// default).
const maxPipelined = 5

// releasedKey is the context key of the function a Produce calls once
// its batches are appended (withRelease).
type releasedKey struct{}

func withRelease(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, releasedKey{}, f)
}

// releaseOf is ctx's release function (withRelease), or nil.
func releaseOf(ctx context.Context) func() {
	f, _ := ctx.Value(releasedKey{}).(func())
	return f
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.nc.Close()
		c.sess.end(c.s)
	})
}

// serve reads and answers requests until the connection ends.
func (c *conn) serve(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	var inflight sync.WaitGroup // the requests being handled
	defer func() {
		cancel()
		inflight.Wait()
	}()
	frames := make(chan frame, 1)
	// next asks the reader for a frame: before authentication frames are
	// read one at a time (a SASL v0 token is not a request), after it one
	// ahead.
	next := make(chan readSpec, 1)
	go c.readLoop(ctx, frames, next)
	preAuth, authed := readSpec{preAuthMaxBytes, c.s.preAuthIdle}, readSpec{c.s.d.MaxRequestBytes, c.s.d.IdleTimeout}
	next <- preAuth
	slots := make(chan struct{}, maxPipelined)
	written := make(chan struct{}) // closed once the previous answer is written
	close(written)
	for {
		var f frame
		select {
		case f = <-frames:
		case <-ctx.Done():
			return
		}
		if f.err != nil {
			if !errors.Is(f.err, io.EOF) && !errors.Is(f.err, net.ErrClosed) && ctx.Err() == nil {
				c.s.logger.Debug("connection read", "remote", c.remote, "err", f.err)
			}
			return
		}
		ahead := c.sess.authenticated()
		if ahead {
			next <- authed // read ahead while this one is served
		}
		produce := ahead && !c.sess.rawToken && len(f.body) >= 2 && int16(binary.BigEndian.Uint16(f.body)) == kmsg.Produce.Int16()
		if !produce {
			// Only a produce runs beside the produces before it (they
			// read the session; this one may change it).
			inflight.Wait()
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		released := make(chan struct{})
		var releaseOnce sync.Once
		release := func() { releaseOnce.Do(func() { close(released) }) }
		type result struct {
			mute time.Duration
			err  error
		}
		done := make(chan result, 1)
		prev, mine := written, make(chan struct{})
		written = mine
		inflight.Go(func() {
			defer func() { <-slots }()
			hctx := ctx
			if produce {
				hctx = withRelease(ctx, release)
			}
			answer, mute, err := c.handle(hctx, f.body)
			select { // answers go out in request order
			case <-prev:
			case <-ctx.Done():
				done <- result{0, ctx.Err()}
				return
			}
			if len(answer) > 0 {
				_ = c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, werr := c.nc.Write(answer); werr != nil && err == nil {
					err = werr
				}
			}
			close(mine)
			if err != nil {
				// Also when serve went on past a released produce.
				c.s.logger.Debug("closing connection", "remote", c.remote, "err", err)
				cancel()
			}
			done <- result{mute, err}
		})
		var r result
		select {
		case r = <-done:
		case <-released:
			// Its batches are appended: the next request may be
			// handled while it waits for its acknowledgements.
		case <-ctx.Done():
			return
		}
		if r.err != nil {
			return
		}
		if mute := r.mute; mute > 0 {
			// KIP-219: the answer carried the throttle time; read
			// nothing more from this client until it passed.
			t := time.NewTimer(mute)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		switch {
		case ahead:
		case c.sess.authenticated():
			next <- authed
		default:
			next <- preAuth
		}
	}
}

// readLoop reads one frame per value from next into frames, until a read
// fails.
func (c *conn) readLoop(ctx context.Context, frames chan<- frame, next <-chan readSpec) {
	r := bufio.NewReaderSize(c.nc, 8<<10)
	for {
		var spec readSpec
		select {
		case spec = <-next:
		case <-ctx.Done():
			return
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(spec.idle))
		body, err := readFrame(r, spec.limit)
		select {
		case frames <- frame{body, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// readFrame reads a size-prefixed frame of at most limit bytes. The
// buffer grows with the bytes that arrive, so a size field alone never
// makes it allocate the whole frame.
func readFrame(r io.Reader, limit int) ([]byte, error) {
	var sz [4]byte
	if _, err := io.ReadFull(r, sz[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(sz[:]))
	if n < 0 || int(n) > limit {
		return nil, fmt.Errorf("frame of %d bytes: over the limit of %d", n, limit)
	}
	const step = 1 << 20
	body := make([]byte, 0, min(int(n), step))
	for len(body) < int(n) {
		k := min(int(n)-len(body), max(step, len(body)))
		body = append(body, make([]byte, k)...)
		if _, err := io.ReadFull(r, body[len(body)-k:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return body, nil
}

// answerFrame is res as a response frame: the size, the correlation id,
// the header's tags when flexible (none), and the body, in one buffer.
func answerFrame(corr int32, flexHeader bool, res kmsg.Response) []byte {
	hl := 8
	if flexHeader {
		hl = 9 // the header's empty tagged fields: a zero byte
	}
	b := res.AppendTo(make([]byte, hl, 256))
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-4))
	binary.BigEndian.PutUint32(b[4:], uint32(corr))
	return b
}
