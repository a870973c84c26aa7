// Package httpgate is the front of a Sluice server's Connect handlers: it
// decides a request from its headers before a byte of its body is read.
//
// For every call it
//
//  1. authenticates the caller from the headers (tenants.Authenticator),
//     and answers a refusal at once, in the call's protocol (Connect,
//     gRPC, gRPC-Web), without reading the body: a client with no
//     credentials can make the server hold no more than a request's
//     headers. A procedure the Authenticator has no rule for
//     (tenants.ErrUnknownProcedure) goes to the handler with an empty
//     body, which answers it as before (unimplemented for a path it does
//     not serve);
//  2. refuses a body larger than the procedure allows (Config.MaxRequestBytes,
//     or Config.PublicMaxRequestBytes for procedures open to anonymous
//     callers) when its Content-Length says so;
//  3. runs the server's Admit hook (quotas decided from headers). A
//     refusal with a RetryInfo delay mutes the caller's calls of that
//     procedure on that connection for the delay (at most maxMute), as
//     Kafka mutes a throttled client's channel (KIP-219): its later ones
//     there wait the delay out, unread, before they are decided;
//  4. reserves the request's memory in a budget with three levels, the
//     server, the caller's principal (one tenant; anonymous callers share
//     one pool; brokers have a pool of their own outside the server's, so
//     that tenants cannot starve replication) and the connection. A call
//     that finds no room is refused with resource_exhausted and a
//     RetryInfo, its body never read: on HTTP/2 at once (its waiting would
//     hold the connection's flow-control window), on HTTP/1 after waiting,
//     in arrival order, up to Config.Wait;
//  5. hands the call to the Connect handler with the principal in its
//     context (tenants.Preauthenticated: the auth interceptor does not
//     authenticate again), and gives the memory back when the handler
//     returns.
//
// A request's memory is its body's size (its Content-Length, or the
// procedure's limit while a body of unknown length is being read, lowered
// to what it was once it ends) times a decoding factor (Config.BinaryFactor,
// Config.JSONFactor): decoding holds the body and the message it becomes,
// JSON's intermediate strings on top, and the Go runtime lets the heap grow
// to about twice what is live before it collects. The factors were measured
// as peak RSS per 16 MiB body in flight on a broker (about 40 MiB for
// protobuf, 76 MiB for JSON) with some margin, so the budget bounds the
// server's RSS growth, whatever mix of authenticated and anonymous callers
// sends requests (docs/api.md, "Request memory", has the measurements).
//
// The body is read through a wrapper that turns a transport error (a
// malformed chunked encoding, a chunk extension too long) into
// invalid_argument, the client's error, instead of the unknown that the
// Connect handler would answer, and stops a body of unknown length at the
// procedure's limit.
package httpgate

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/tenants"
)

// Config bounds the requests a server holds. Zero fields take the
// defaults of Defaults.
type Config struct {
	// MaxRequestBytes is the largest body of a call (the Connect handlers'
	// read limit).
	MaxRequestBytes int64
	// PublicMaxRequestBytes is the largest body of a call an anonymous
	// caller may make (signup, token exchange, health, reflection).
	PublicMaxRequestBytes int64
	// ServerBytes bounds the memory of every request in flight but the
	// brokers' own.
	ServerBytes int64
	// PrincipalBytes bounds one tenant's (or the operator's) requests in
	// flight.
	PrincipalBytes int64
	// ConnBytes bounds the requests in flight on one connection.
	ConnBytes int64
	// AnonymousBytes bounds every anonymous caller's requests together
	// (within ServerBytes).
	AnonymousBytes int64
	// InternalBytes bounds the brokers' requests (broker credential), a
	// pool of its own outside ServerBytes.
	InternalBytes int64
	// Wait is how long a request waits for room before it is refused.
	Wait time.Duration
	// BinaryFactor and JSONFactor multiply a body's size into the memory
	// its decoding holds.
	BinaryFactor, JSONFactor int64
	// BodyGrace and BodyRate bound how long a body may take to arrive:
	// BodyGrace, and its size at BodyRate bytes/s beyond.
	BodyGrace time.Duration
	BodyRate  int64
}

// Defaults are the budget's defaults for a server whose largest request is
// maxRequestBytes.
func Defaults(maxRequestBytes int64) Config {
	return Config{
		MaxRequestBytes:       maxRequestBytes,
		PublicMaxRequestBytes: PublicMaxRequestBytes,
		ServerBytes:           DefaultServerBytes,
		PrincipalBytes:        DefaultServerBytes / 4,
		ConnBytes:             DefaultServerBytes / 4,
		AnonymousBytes:        DefaultServerBytes / 16,
		InternalBytes:         DefaultServerBytes / 4,
		Wait:                  5 * time.Second,
		BinaryFactor:          6,
		JSONFactor:            10,
		BodyGrace:             10 * time.Second,
		BodyRate:              128 << 10,
	}
}

// PublicMaxRequestBytes is the default of Config.PublicMaxRequestBytes,
// the largest message of a procedure open to anonymous callers.
const PublicMaxRequestBytes = 64 << 10

// DefaultServerBytes is the default of Config.ServerBytes (the servers'
// --request-memory flag).
const DefaultServerBytes = 256 << 20

func (c Config) withDefaults() Config {
	d := Defaults(c.MaxRequestBytes)
	set := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&c.PublicMaxRequestBytes, d.PublicMaxRequestBytes)
	set(&c.ServerBytes, d.ServerBytes)
	set(&c.PrincipalBytes, c.ServerBytes/4)
	set(&c.ConnBytes, c.PrincipalBytes)
	set(&c.AnonymousBytes, c.ServerBytes/16)
	set(&c.InternalBytes, c.ServerBytes/4)
	set(&c.BinaryFactor, d.BinaryFactor)
	set(&c.JSONFactor, d.JSONFactor)
	set(&c.BodyRate, d.BodyRate)
	if c.Wait <= 0 {
		c.Wait = d.Wait
	}
	if c.BodyGrace <= 0 {
		c.BodyGrace = d.BodyGrace
	}
	c.PublicMaxRequestBytes = min(c.PublicMaxRequestBytes, c.MaxRequestBytes)
	return c
}

// Admit decides a call from its headers, after authentication and before
// its body is read: a non-nil error (a *connect.Error) refuses it. size is
// the body's Content-Length, or -1 when unknown.
type Admit func(ctx context.Context, r *http.Request, procedure string, p tenants.Principal, size int64) error

// Gate wraps Connect handlers (Wrap); the http.Server that serves them
// sets ConnContext, so that each connection has its own pool.
type Gate struct {
	cfg       Config
	auth      tenants.Authenticator
	admit     Admit
	forwarded func(*http.Request) bool
	errw      *connect.ErrorWriter
	budget    *budget
	server    *pool
	intern    *pool
	logger    *slog.Logger
	m         *metrics
}

// Deps are what a Gate calls.
type Deps struct {
	Auth tenants.Authenticator
	// Admit is optional.
	Admit Admit
	// Forwarded (optional) tells a call another server forwarded on a
	// client's behalf (with the client's credentials): it is not held to
	// its connection's pool, which it shares with every client that
	// server forwards for.
	Forwarded func(*http.Request) bool
	// Registerer takes the gate's metrics (optional), named
	// <Namespace>_<Subsystem>_request_memory_….
	Registerer           prometheus.Registerer
	Namespace, Subsystem string
	Logger               *slog.Logger
}

// New returns a gate over cfg (MaxRequestBytes must be set).
func New(cfg Config, deps Deps) *Gate {
	cfg = cfg.withDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gate{
		cfg:       cfg,
		auth:      deps.Auth,
		admit:     deps.Admit,
		forwarded: deps.Forwarded,
		errw:      connect.NewErrorWriter(),
		budget:    newBudget(),
		server:    &pool{name: "server", cap: cfg.ServerBytes},
		intern:    &pool{name: "internal", cap: cfg.InternalBytes},
		logger:    deps.Logger,
	}
	g.m = newMetrics(deps.Registerer, deps.Namespace, deps.Subsystem, g)
	return g
}

// Config is the gate's configuration, defaults filled in.
func (g *Gate) Config() Config { return g.cfg }

type connKey struct{}

// conn is one connection's state: its pool, and the principals whose
// calls on it are muted, and until when.
type conn struct {
	pool *pool
	mu   sync.Mutex
	// muted: principal key and procedure → until when those calls wait
	// (KIP-219).
	muted map[string]time.Time
}

// ConnContext gives each connection its own pool and mutes
// (http.Server.ConnContext).
func (g *Gate) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &conn{pool: &pool{name: "connection", cap: g.cfg.ConnBytes}})
}

// maxMute bounds how long a connection's calls are held after a refusal;
// maxMutedBody is the largest body of an HTTP/2 call that is held (the
// HTTP/2 server buffers up to 1 MiB per connection of bodies no handler
// has read).
const (
	maxMute      = 5 * time.Second
	maxMutedBody = 64 << 10
)

// mute holds key's later calls on c until retry (from the refusal err's
// RetryInfo) has passed, at most maxMute; an error without one mutes
// nothing.
func (c *conn) mute(key string, err error) {
	d := retryDelay(err)
	if c == nil || d <= 0 {
		return
	}
	until := time.Now().Add(min(d, maxMute))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.muted == nil {
		c.muted = map[string]time.Time{}
	}
	if until.After(c.muted[key]) {
		c.muted[key] = until
	}
}

// waitMuted waits until key's calls on c are no longer muted, or ctx
// ends; it reports whether it waited.
func (c *conn) waitMuted(ctx context.Context, key string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	until, ok := c.muted[key]
	if ok && !time.Now().Before(until) {
		delete(c.muted, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return true
}

// retryDelay is the RetryInfo delay of a Connect error, or 0.
func retryDelay(err error) time.Duration {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration()
			}
		}
	}
	return 0
}

// Wrap returns h behind the gate. path is the route h is mounted at (as
// the generated New…Handler functions return it), for the procedure
// names: a request's procedure is its URL path. h's procedures take one
// request message (unary and server-streaming calls): an enveloped body
// is cut after its first message.
func (g *Gate) Wrap(path string, h http.Handler) (string, http.Handler) {
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, h, false) })
}

// WrapClientStreams is Wrap for handlers whose calls stream messages from
// the client (gRPC reflection): the call holds its first message's
// memory, and each later message is bounded by the handler's read limit
// alone while it is decoded.
func (g *Gate) WrapClientStreams(path string, h http.Handler) (string, http.Handler) {
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, h, true) })
}

func (g *Gate) serve(w http.ResponseWriter, r *http.Request, next http.Handler, clientStreams bool) {
	procedure := r.URL.Path
	ctx := r.Context()
	p, err := g.auth.Authenticate(ctx, procedure, r.Header)
	if errors.Is(err, tenants.ErrUnknownProcedure) {
		// Not a procedure anyone may call: the handler answers it as it
		// answers a path it does not serve (unimplemented), or its auth
		// interceptor refuses it, without a body to read.
		r.Body = http.NoBody
		r.ContentLength = 0
		next.ServeHTTP(w, r)
		return
	}
	if err != nil {
		g.refuse(w, r, "unauthenticated", tenants.AuthConnectError(err))
		return
	}
	limit := g.cfg.MaxRequestBytes
	if p.Kind == tenants.PrincipalAnonymous {
		limit = g.cfg.PublicMaxRequestBytes
	}
	size := r.ContentLength
	if size < 0 && enveloped(r) {
		// gRPC clients other than connect-go's send no Content-Length: the
		// message's envelope says how long it is.
		size = envelopeSize(r)
	}
	if size > limit {
		g.refuse(w, r, "too_large", connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("request body of %d bytes is larger than this procedure's limit of %d", size, limit)))
		return
	}
	if g.admit != nil {
		// A call of a principal refused with a delay on this connection
		// waits that delay out first, unread (KIP-219's muted channel):
		// a client that does not wait is slowed, not refused again and
		// again; one that waits (the Go SDK) never meets the mute.
		c, _ := ctx.Value(connKey{}).(*conn)
		// Per procedure: a client's other calls on the connection (a
		// consumer's fetches beside its producer's refused produces) go
		// on, and are decided, and muted, on their own. Over HTTP/2 only
		// calls of a small body are held: a held call's unread body
		// holds the connection's flow-control window, and a large one
		// would stall the connection's other calls; a large one is
		// decided at once instead (refused, in all likelihood, unread).
		key := principalKey(p) + " " + procedure
		if hold := r.ProtoMajor < 2 || (size >= 0 && size <= maxMutedBody); hold && c.waitMuted(ctx, key) {
			g.m.muted.Inc()
			if ctx.Err() != nil {
				return
			}
		}
		if err := g.admit(ctx, r, procedure, p, size); err != nil {
			c.mute(key, err)
			g.refuse(w, r, "admit", err)
			return
		}
	}
	// What the call holds, and where its body is cut: with a
	// Content-Length the HTTP layer ends the body there; with an
	// envelope's size, one empty envelope past it; unknown, at limit,
	// and what the body was holds once it ends.
	reserve, cut, shrink := size, int64(-1), false
	switch {
	case size < 0:
		reserve, cut, shrink = limit, limit, true
	case r.ContentLength < 0 && !clientStreams:
		cut = size + envelopeSlack
	}
	if compressed(r) {
		// What it decompresses into is known only once decoded (the
		// handler bounds that by limit).
		reserve, shrink = limit, false
	}
	factor := g.cfg.BinaryFactor
	if strings.Contains(r.Header.Get("Content-Type"), "json") {
		factor = g.cfg.JSONFactor
	}
	c := g.charge(ctx, r, p, reserve*factor)
	start := time.Now()
	// On HTTP/2 a call that finds no room is refused at once: while it
	// waited, the body its client sent meanwhile would hold the
	// connection's flow-control window (the HTTP/2 server gives it back
	// only as a handler reads), and the calls admitted on the same
	// connection could not receive theirs. An HTTP/1 call holds only its
	// own connection: it waits.
	wait, retry := g.cfg.Wait, time.Second
	if r.ProtoMajor >= 2 {
		wait, retry = 0, 100*time.Millisecond
	}
	if !g.budget.acquire(ctx, c, wait) {
		if ctx.Err() != nil {
			return // the client went away
		}
		g.refuse(w, r, "memory", busy(wait, retry))
		return
	}
	g.m.observeWait(time.Since(start))
	defer g.budget.release(c)
	// The body must come in time: a client that reserved memory and then
	// sends its body slowly, or not at all, would hold the memory for as
	// long as it likes. Not for calls that stream from the client.
	rc := http.NewResponseController(w)
	if !clientStreams {
		_ = rc.SetReadDeadline(time.Now().Add(g.bodyTime(reserve)))
	}
	r = r.WithContext(tenants.Preauthenticated(ctx, p))
	r.Body = &body{ReadCloser: r.Body, limit: cut, known: cut < 0, onEnd: func(n int64) {
		if shrink {
			g.budget.shrink(c, n*factor)
		}
		if !clientStreams {
			_ = rc.SetReadDeadline(time.Time{}) // a long poll may follow
		}
	}}
	next.ServeHTTP(w, r)
}

// charge is the pools a call of p holds reserve bytes of: the server's
// (the internal pool for brokers), p's own, and the connection's.
func (g *Gate) charge(ctx context.Context, r *http.Request, p tenants.Principal, reserve int64) *charge {
	shared, key, cap := g.server, principalKey(p), g.cfg.PrincipalBytes
	switch p.Kind {
	case tenants.PrincipalBroker:
		shared, key = g.intern, ""
	case tenants.PrincipalAnonymous:
		cap = g.cfg.AnonymousBytes
	}
	pools := []*pool{shared}
	if key != "" {
		pools = append(pools, g.budget.principal(key, cap))
	}
	if p.Kind == tenants.PrincipalAnonymous {
		// And a sixteenth of that per client address, so that one
		// address cannot hold the anonymous pool (and every signup and
		// token exchange with it). Behind a proxy every client has its
		// address: the part still holds hundreds of small calls.
		pools = append(pools, g.budget.principal("anonymous@"+clientIP(r), max(cap/16, g.cfg.PublicMaxRequestBytes*g.cfg.JSONFactor)))
	}
	// A call another server forwarded shares its connection with every
	// client that server forwards for: the connection's pool would let
	// one tenant's forwarded calls refuse another's.
	if c, ok := ctx.Value(connKey{}).(*conn); ok && (g.forwarded == nil || !g.forwarded(r)) {
		pools = append(pools, c.pool)
	}
	return newCharge(reserve, pools...)
}

// bodyTime is how long a body of n bytes may take to arrive: by default
// 10 s, and 128 KiB/s beyond (16 MiB: 2 minutes 18 s).
func (g *Gate) bodyTime(n int64) time.Duration {
	return g.cfg.BodyGrace + time.Duration(n)*time.Second/time.Duration(g.cfg.BodyRate)
}

// enveloped reports whether r's body is a stream of enveloped messages
// (gRPC, gRPC-Web, Connect streaming): a flags byte, a 4-byte big-endian
// length, the message.
func enveloped(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+")
}

// envelopeSlack is what a body of one message may hold past its first
// envelope: an empty envelope, which some clients send to end a stream.
const envelopeSlack = 5

// envelopeSize reads the 5-byte prefix of r's first envelope, puts it back
// in front of the body, and returns the envelope's size (prefix and
// message), or -1 when the body ends first.
func envelopeSize(r *http.Request) int64 {
	var prefix [5]byte
	n, err := io.ReadFull(r.Body, prefix[:])
	r.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(prefix[:n]), r.Body), Closer: r.Body}
	if err != nil {
		return -1
	}
	return 5 + int64(binary.BigEndian.Uint32(prefix[1:]))
}

type readCloser struct {
	io.Reader
	io.Closer
}

// compressed reports whether r's messages may be compressed (their size
// on the wire says nothing of what they decode into).
func compressed(r *http.Request) bool {
	for _, h := range []string{"Content-Encoding", "Grpc-Encoding", "Connect-Content-Encoding"} {
		if v := r.Header.Get(h); v != "" && v != "identity" {
			return true
		}
	}
	return false
}

// clientIP is the address a request came from (without its port).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// principalKey names p's pool and mutes: its tenant, or its kind.
func principalKey(p tenants.Principal) string {
	if p.Kind == tenants.PrincipalTenant {
		return "tenant:" + p.TenantID
	}
	return p.Kind.String()
}

// busy is the refusal of a request that found no room in the budget
// within waited: retry after retry.
func busy(waited, retry time.Duration) error {
	within := "at once"
	if waited > 0 {
		within = "within " + waited.String()
	}
	err := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"server busy: the requests in flight hold this server's request memory, and this one found no room %s; retry in %s", within, retry))
	if d, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// refuse answers err in the request's protocol without reading its body.
func (g *Gate) refuse(w http.ResponseWriter, r *http.Request, reason string, err error) {
	g.m.refused.WithLabelValues(reason).Inc()
	// An HTTP/1 connection is kept when the unread body is small (the
	// server discards up to 256 KiB of it) and closed otherwise, so a
	// mute outlives the refusal on a connection a client reuses.
	if werr := g.errw.Write(w, r, err); werr != nil {
		g.logger.Debug("write refusal", "err", werr)
	}
}

// body reads a request's body for the Connect handler: a transport error
// becomes invalid_argument, a body of unknown length is cut at limit, and
// onEnd learns the length once the body ends.
type body struct {
	io.ReadCloser
	limit int64
	known bool
	n     int64
	ended bool
	onEnd func(n int64)
}

func (b *body) Read(p []byte) (int, error) {
	if !b.known {
		// Read one byte past the limit at most, to tell a body of exactly
		// limit bytes from a longer one.
		if b.n > b.limit {
			return 0, b.tooLarge()
		}
		if rem := b.limit + 1 - b.n; int64(len(p)) > rem {
			p = p[:rem]
		}
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if !b.known && b.n > b.limit {
		return n, b.tooLarge()
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if !b.ended {
			b.ended = true
			b.onEnd(b.n)
		}
	default:
		var ce *connect.Error
		if errors.As(err, &ce) {
			return n, err
		}
		return n, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("read request body: %w", err))
	}
	return n, err
}

func (b *body) tooLarge() error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("request body is longer than the %d bytes it may have (the procedure's limit, or what its message's envelope declared)", b.limit))
}
