package httpgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// testAuth accepts "Bearer tenant-<id>" as that tenant, "Bearer broker" as
// a broker, and GetMetadata from anyone.
type testAuth struct{}

func (testAuth) Authenticate(_ context.Context, procedure string, h http.Header) (tenants.Principal, error) {
	if procedure == sluicev1connect.RecordServiceGetMetadataProcedure {
		return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
	}
	tok, err := tenants.BearerToken(h)
	if err != nil {
		return tenants.Principal{}, err
	}
	switch {
	case tok == "anonymous": // an anonymous caller of any procedure, for the tests
		return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
	case tok == "broker":
		return tenants.Principal{Kind: tenants.PrincipalBroker}, nil
	case strings.HasPrefix(tok, "tenant-"):
		return tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: strings.TrimPrefix(tok, "tenant-"), Scopes: tenants.AllScopes()}, nil
	}
	return tenants.Principal{}, fmt.Errorf("%w: unknown token", tenants.ErrInvalidToken)
}

// records is a RecordService whose Produce holds each call until release
// is closed, counting the calls inside it.
type records struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	release chan struct{}
	in, max atomic.Int64
	calls   atomic.Int64
	// principal is the last caller seen through the auth interceptor.
	principal atomic.Pointer[tenants.Principal]
}

func (r *records) Produce(ctx context.Context, req *connect.Request[sluicev1.ProduceRequest]) (*connect.Response[sluicev1.ProduceResponse], error) {
	r.calls.Add(1)
	p, _ := tenants.PrincipalFrom(ctx)
	r.principal.Store(&p)
	n := r.in.Add(1)
	defer r.in.Add(-1)
	for {
		m := r.max.Load()
		if n <= m || r.max.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-r.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&sluicev1.ProduceResponse{}), nil
}

func (r *records) GetMetadata(context.Context, *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	return connect.NewResponse(&sluicev1.GetMetadataResponse{}), nil
}

// countingListener counts the bytes the server reads from its
// connections.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

type setup struct {
	gate *Gate
	svc  *records
	url  string
	read *atomic.Int64 // bytes the server read
}

func start(t *testing.T, cfg Config) *setup {
	t.Helper()
	return startWith(t, cfg, Deps{Auth: testAuth{}})
}

func startWith(t *testing.T, cfg Config, deps Deps) *setup {
	t.Helper()
	s := &setup{svc: &records{release: make(chan struct{})}, read: &atomic.Int64{}}
	s.gate = New(cfg, deps)
	mux := http.NewServeMux()
	mux.Handle(s.gate.Wrap(sluicev1connect.NewRecordServiceHandler(s.svc,
		connect.WithInterceptors(tenants.NewAuthInterceptor(testAuth{})),
		connect.WithReadMaxBytes(int(cfg.MaxRequestBytes)))))
	srv := httptest.NewUnstartedServer(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Config.ConnContext = s.gate.ConnContext
	srv.Listener = countingListener{Listener: srv.Listener, read: s.read}
	srv.Start()
	t.Cleanup(func() {
		select {
		case <-s.svc.release:
		default:
			close(s.svc.release)
		}
		srv.Close()
	})
	s.url = srv.URL
	return s
}

// client is a gRPC client over h2c (one connection) with token tok.
func (s *setup) client(tok string) sluicev1connect.RecordServiceClient {
	return sluicev1connect.NewRecordServiceClient(h2c.Client(), s.url, connect.WithGRPC(),
		connect.WithInterceptors(tenants.Bearer(tok)))
}

// http1Client is a Connect client over HTTP/1.1 (a connection per call in
// flight) with token tok.
func (s *setup) http1Client(tok string) sluicev1connect.RecordServiceClient {
	return sluicev1connect.NewRecordServiceClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}, s.url,
		connect.WithInterceptors(tenants.Bearer(tok)))
}

func produce(size int) *connect.Request[sluicev1.ProduceRequest] {
	return connect.NewRequest(&sluicev1.ProduceRequest{Topic: "t", Payload: &sluicev1.ProduceRequest_Records{
		Records: &sluicev1.RecordList{Records: []*sluicev1.Record{{Value: bytes.Repeat([]byte("x"), size)}}}}})
}

func (s *setup) waiters() int {
	s.gate.budget.mu.Lock()
	defer s.gate.budget.mu.Unlock()
	return s.gate.budget.waiters.Len()
}

// TestGateRefusesUnauthenticatedBeforeReadingBody: a 16 MiB body without
// credentials is answered unauthenticated, in the caller's protocol,
// after the server read little more than its headers; the handler never
// runs. It used to be read and decoded first (issue 29: 32 connections
// of such bodies took a broker from 183 MiB to 2.1 GiB).
func TestGateRefusesUnauthenticatedBeforeReadingBody(t *testing.T) {
	t.Parallel()
	s := start(t, Defaults(16<<20))
	body := bytes.Repeat([]byte("a"), 16<<20)

	// Connect JSON over HTTP/1.1, as the attack sent it.
	req, err := http.NewRequest(http.MethodPost, s.url+sluicev1connect.RecordServiceProduceProcedure, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Transport: &http.Transport{}}
	res, err := hc.Do(req)
	require.NoError(t, err)
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "%s", out)
	require.Contains(t, string(out), `"code":"unauthenticated"`)
	require.Less(t, s.read.Load(), int64(1<<20), "bytes the server read of a 16 MiB body")

	// gRPC over h2c: the same refusal as a gRPC status.
	_, err = s.client("wrong").Produce(context.Background(), produce(8<<20))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
	require.Zero(t, s.svc.calls.Load())
	require.Less(t, s.read.Load(), int64(4<<20), "bytes the server read of 16 + 8 MiB of bodies")

	// A caller the gate let in is not authenticated twice, and the
	// handler sees its principal.
	close(s.svc.release)
	_, err = s.client("tenant-a").Produce(context.Background(), produce(10))
	require.NoError(t, err)
	require.Equal(t, "a", s.svc.principal.Load().TenantID)
}

// TestGateBoundsRequestMemory: HTTP/1 calls that would hold more than the
// server's budget wait, in order, and go in as the ones before them
// finish; the handlers never hold more than the budget at once.
func TestGateBoundsRequestMemory(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	cfg.ServerBytes, cfg.PrincipalBytes, cfg.ConnBytes = 4<<20, 4<<20, 4<<20
	cfg.Wait = time.Minute
	cfg.BinaryFactor = 2
	s := start(t, cfg)
	c := s.http1Client("tenant-a")
	const calls = 12
	errs := make(chan error, calls)
	for range calls {
		// ~512 KiB of protobuf, times the binary factor 2: 1 MiB each,
		// so four fit.
		go func() { _, err := c.Produce(context.Background(), produce(512<<10-64)); errs <- err }()
	}
	testenv.Wait(t, 30*time.Second, "4 calls in, 8 waiting", func() error {
		if in, w := s.svc.in.Load(), s.waiters(); in != 4 || w != 8 {
			return fmt.Errorf("%d in the handler, %d waiting", in, w)
		}
		return nil
	})
	close(s.svc.release)
	for range calls {
		require.NoError(t, <-errs)
	}
	require.Equal(t, int64(4), s.svc.max.Load(), "most calls in the handler at once")
	require.Zero(t, s.gate.used(s.gate.server), "memory held after every call ended")
}

// TestGateTenantPoolsAreSeparate: one tenant filling its own pool makes
// only its own requests wait; another tenant's go in, and brokers have a
// pool of their own even with the server's full.
func TestGateTenantPoolsAreSeparate(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	cfg.ServerBytes, cfg.PrincipalBytes, cfg.ConnBytes, cfg.InternalBytes = 3<<20, 2<<20, 4<<20, 1<<20
	cfg.Wait = time.Minute
	cfg.BinaryFactor = 2
	s := start(t, cfg)
	a := s.http1Client("tenant-a")
	errs := make(chan error, 4)
	for range 3 {
		go func() { _, err := a.Produce(context.Background(), produce(512<<10-64)); errs <- err }()
	}
	testenv.Wait(t, 30*time.Second, "a: 2 in, 1 waiting", func() error {
		if in, w := s.svc.in.Load(), s.waiters(); in != 2 || w != 1 {
			return fmt.Errorf("%d in the handler, %d waiting", in, w)
		}
		return nil
	})
	// b's 1 MiB fits beside a's 2 MiB in the server's 3 MiB, though a's
	// third call waits before it.
	go func() {
		_, err := s.http1Client("tenant-b").Produce(context.Background(), produce(512<<10-64))
		errs <- err
	}()
	testenv.Wait(t, 30*time.Second, "b in beside a", func() error {
		if in := s.svc.in.Load(); in != 3 {
			return fmt.Errorf("%d in the handler", in)
		}
		return nil
	})
	// The server pool is full; a broker's call goes to its own pool.
	require.InDelta(t, 3<<20, s.gate.used(s.gate.server), 1024)
	_, err := s.client("tenant-c").Produce(context.Background(), produce(4096))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "c finds the server's pool full: %v", err)
	brokerErr := make(chan error, 1)
	go func() {
		_, err := s.client("broker").Produce(context.Background(), produce(512<<10-64))
		brokerErr <- err
	}()
	testenv.Wait(t, 30*time.Second, "the broker's call in", func() error {
		if in := s.svc.in.Load(); in != 4 {
			return fmt.Errorf("%d in the handler", in)
		}
		return nil
	})
	require.Equal(t, 1, s.waiters(), "only a's third call waits")
	close(s.svc.release)
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.NoError(t, <-brokerErr)
}

// TestGateRefusesWhatFindsNoRoom: an HTTP/2 call that finds no room is
// refused resource_exhausted at once, with a RetryInfo, and never
// decoded; an HTTP/1 one after the wait; one whose Content-Length passes
// the procedure's limit at once.
func TestGateRefusesWhatFindsNoRoom(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	cfg.ServerBytes, cfg.PrincipalBytes, cfg.ConnBytes = 1<<20, 1<<20, 1<<20
	cfg.Wait = 50 * time.Millisecond
	cfg.BinaryFactor = 2
	s := start(t, cfg)
	c := s.client("tenant-a")
	first := make(chan error, 1)
	go func() { _, err := c.Produce(context.Background(), produce(512<<10-64)); first <- err }()
	testenv.Wait(t, 30*time.Second, "the first call in", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	retryOf := func(err error) time.Duration {
		var ce *connect.Error
		require.ErrorAs(t, err, &ce)
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					return ri.GetRetryDelay().AsDuration()
				}
			}
		}
		return 0
	}
	_, err := c.Produce(context.Background(), produce(512<<10-64))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "server busy")
	require.Equal(t, 100*time.Millisecond, retryOf(err))

	_, err = s.http1Client("tenant-a").Produce(context.Background(), produce(512<<10-64))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "no room within 50ms")
	require.Equal(t, time.Second, retryOf(err))
	require.Equal(t, int64(1), s.svc.calls.Load(), "calls decoded")

	_, err = c.Produce(context.Background(), produce(2<<20))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "larger than this procedure's limit")
	close(s.svc.release)
	require.NoError(t, <-first)
}

// rawHTTP sends request on a new TCP connection and returns the status
// line's code and the body of the answer.
func rawHTTP(t *testing.T, url string, request string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	go func() { _, _ = io.WriteString(conn, request) }()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(out)
}

// TestGateMalformedChunkedBody: a chunked body the HTTP layer cannot parse
// is the client's error, answered 400 invalid_argument, not 500 unknown
// (issue 29: chunk size ffffffffffffffff2, a 1 MiB chunk extension).
func TestGateMalformedChunkedBody(t *testing.T) {
	t.Parallel()
	s := start(t, Defaults(1<<20))
	close(s.svc.release)
	head := "POST " + sluicev1connect.RecordServiceProduceProcedure + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer tenant-a\r\nTransfer-Encoding: chunked\r\n\r\n"
	for name, chunks := range map[string]string{
		"chunk size overflows":  "ffffffffffffffff2\r\n{}\r\n0\r\n\r\n",
		"chunk extension 1 MiB": "2;" + strings.Repeat("e", 1<<20) + "\r\n{}\r\n0\r\n\r\n",
		"chunk size not hex":    "zz\r\n{}\r\n0\r\n\r\n",
	} {
		code, body := rawHTTP(t, s.url, head+chunks)
		require.Equal(t, http.StatusBadRequest, code, "%s: %s", name, body)
		require.Contains(t, body, `"code":"invalid_argument"`, name)
	}
	// A well-formed chunked body goes through.
	code, body := rawHTTP(t, s.url, head+"2\r\n{}\r\n0\r\n\r\n")
	require.Equal(t, http.StatusOK, code, body)
}

// TestGateBodyOfUnknownLength: a chunked body holds the procedure's limit
// while it is read and what it was once it ends; one past the limit is
// refused resource_exhausted when the limit is reached, not read to its
// end.
func TestGateBodyOfUnknownLength(t *testing.T) {
	t.Parallel()
	cfg := Defaults(64 << 10)
	s := start(t, cfg)
	head := "POST " + sluicev1connect.RecordServiceProduceProcedure + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer tenant-a\r\nTransfer-Encoding: chunked\r\n\r\n"
	done := make(chan struct{})
	var code int
	var body string
	go func() {
		defer close(done)
		code, body = rawHTTP(t, s.url, head+"2\r\n{}\r\n0\r\n\r\n")
	}()
	testenv.Wait(t, 30*time.Second, "the call in the handler", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	require.Equal(t, int64(2*cfg.JSONFactor), s.gate.used(s.gate.server), "a 2-byte JSON body's memory once it ended")
	close(s.svc.release)
	<-done
	require.Equal(t, http.StatusOK, code, body)

	chunk := fmt.Sprintf("%x\r\n%s\r\n", 32<<10, strings.Repeat("a", 32<<10))
	code, body = rawHTTP(t, s.url, head+strings.Repeat(chunk, 64))
	require.Equal(t, http.StatusTooManyRequests, code, body)
	require.Contains(t, body, `"code":"resource_exhausted"`)
	require.Contains(t, body, "longer than the 65536 bytes")
	require.Less(t, s.read.Load(), int64(1<<20), "bytes read of a 2 MiB body over a 64 KiB limit")
}

// TestGateSizesEnvelopes: a gRPC call without a Content-Length (as
// grpc-go's clients send) holds what its message's envelope declares, not
// the procedure's limit; a compressed one holds the limit (what it
// decompresses into is unknown until decoded).
func TestGateSizesEnvelopes(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	s := start(t, cfg)
	msg, err := proto.Marshal(produce(1000).Msg)
	require.NoError(t, err)
	env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	sendBody := func(encoding string, body ...[]byte) chan error {
		var rs []io.Reader
		for _, b := range body {
			rs = append(rs, bytes.NewReader(b))
		}
		// A reader of unknown length: the HTTP/2 client sends no
		// Content-Length.
		req, err := http.NewRequest(http.MethodPost, s.url+sluicev1connect.RecordServiceProduceProcedure, io.MultiReader(rs...))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Authorization", "Bearer tenant-a")
		if encoding != "" {
			req.Header.Set("Grpc-Encoding", encoding)
		}
		done := make(chan error, 1)
		go func() {
			res, err := h2c.Client().Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if st := res.Trailer.Get("Grpc-Status"); st != "0" {
					err = fmt.Errorf("grpc-status %q: %s", st, res.Trailer.Get("Grpc-Message"))
				}
			}
			done <- err
		}()
		return done
	}
	send := func(encoding string) chan error { return sendBody(encoding, env, msg) }
	done := send("")
	testenv.Wait(t, 30*time.Second, "the call in the handler", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	require.Equal(t, int64(5+len(msg))*cfg.BinaryFactor, s.gate.used(s.gate.server), "held for a call sized by its envelope")
	s.svc.release <- struct{}{}
	require.NoError(t, <-done)

	done = send("identity")
	testenv.Wait(t, 30*time.Second, "the second call in the handler", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	require.Equal(t, int64(5+len(msg))*cfg.BinaryFactor, s.gate.used(s.gate.server), "identity is not compression")
	s.svc.release <- struct{}{}
	require.NoError(t, <-done)

	// gzip declared (the body need not be compressed for the gate to
	// reserve the limit; the handler then refuses the flag-less message or
	// takes it, either way after the gate held the limit).
	done = send("gzip")
	testenv.Wait(t, 30*time.Second, "the third call in the handler", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	require.Equal(t, cfg.MaxRequestBytes*cfg.BinaryFactor, s.gate.used(s.gate.server), "held for a compressed call: the limit")
	s.svc.release <- struct{}{}
	<-done

	// A unary call is one message: a second one past what the first
	// envelope declared is refused, not decoded.
	big := binary.BigEndian.AppendUint32([]byte{0}, 512<<10)
	err = <-sendBody("", env, msg, big, make([]byte, 512<<10))
	require.ErrorContains(t, err, "longer than the")
	require.Equal(t, int64(3), s.svc.calls.Load(), "calls that reached the handler")
}

// TestGateForwardedCallsSkipTheConnectionPool: calls another server
// forwarded for its clients share that server's connection, so they are
// not held to the connection's pool (one tenant's forwarded calls would
// refuse another's); they still count in the server's and their tenant's.
func TestGateForwardedCallsSkipTheConnectionPool(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	cfg.ConnBytes, cfg.BinaryFactor = 1<<20, 2
	s := startWith(t, cfg, Deps{Auth: testAuth{}, Forwarded: func(r *http.Request) bool { return r.Header.Get("Test-Forwarded") != "" }})
	forwarded := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Test-Forwarded", "1")
			return next(ctx, req)
		}
	})
	hc := h2c.Client() // one connection for all the calls below
	plain := sluicev1connect.NewRecordServiceClient(hc, s.url, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer("tenant-a")))
	fwd := sluicev1connect.NewRecordServiceClient(hc, s.url, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer("tenant-b"), forwarded))
	first := make(chan error, 1)
	go func() { _, err := plain.Produce(context.Background(), produce(512<<10-64)); first <- err }()
	testenv.Wait(t, 30*time.Second, "the first call in", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	_, err := plain.Produce(context.Background(), produce(512<<10-64))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "the connection's pool is full: %v", err)
	second := make(chan error, 1)
	go func() { _, err := fwd.Produce(context.Background(), produce(512<<10-64)); second <- err }()
	testenv.Wait(t, 30*time.Second, "the forwarded call in beside it", func() error {
		if s.svc.in.Load() != 2 {
			return fmt.Errorf("%d in the handler", s.svc.in.Load())
		}
		return nil
	})
	close(s.svc.release)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
}

// TestGateBodyMustArrive: a call that reserved memory and then does not
// send its body is cut when its time is up (BodyGrace, and the body's
// size at BodyRate), and its memory given back: a client cannot hold
// memory by sending slowly.
func TestGateBodyMustArrive(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	cfg.BodyGrace = 300 * time.Millisecond
	s := start(t, cfg)
	close(s.svc.release)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST "+sluicev1connect.RecordServiceProduceProcedure+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\n"+
		"Authorization: Bearer tenant-a\r\nContent-Length: 100000\r\n\r\n")
	require.NoError(t, err)
	testenv.Wait(t, 30*time.Second, "the call's memory held", func() error {
		if s.gate.used(s.gate.server) == 0 {
			return errors.New("nothing held yet")
		}
		return nil
	})
	testenv.Wait(t, 30*time.Second, "the call cut and its memory given back", func() error {
		if n := s.gate.used(s.gate.server); n != 0 {
			return fmt.Errorf("%d bytes held", n)
		}
		return nil
	})
	require.Zero(t, s.svc.calls.Load(), "never decoded")
}

// TestGateAnonymousCallersShareByAddress: anonymous callers from one
// address hold at most their address's part of the anonymous pool, so
// one address cannot take it (and every signup and token exchange with
// it); another address's calls go in beside.
func TestGateAnonymousCallersShareByAddress(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	// Per address: 1 MiB (a sixteenth, and at least one largest
	// anonymous JSON call: 256 KiB × 4).
	cfg.AnonymousBytes, cfg.PublicMaxRequestBytes, cfg.JSONFactor, cfg.Wait = 16<<20, 256<<10, 4, 200*time.Millisecond
	s := start(t, cfg)
	from := func(ip string) sluicev1connect.RecordServiceClient {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return sluicev1connect.NewRecordServiceClient(&http.Client{Transport: &http.Transport{DialContext: d.DialContext}}, s.url,
			connect.WithInterceptors(tenants.Bearer("anonymous")))
	}
	a, b := from("127.0.0.1"), from("127.0.0.2")
	errs := make(chan error, 2)
	// 100 KiB × 6 = 600 KiB: one fits an address's 1 MiB, two do not.
	go func() { _, err := a.Produce(context.Background(), produce(100<<10)); errs <- err }()
	testenv.Wait(t, 30*time.Second, "the first call in", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	// (Admitted, it would wait in the handler: the deadline ends it.)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := a.Produce(ctx, produce(100<<10))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "a second call from the same address: %v", err)
	go func() { _, err := b.Produce(context.Background(), produce(100<<10)); errs <- err }()
	testenv.Wait(t, 30*time.Second, "another address's call in beside", func() error {
		if s.svc.in.Load() != 2 {
			return fmt.Errorf("%d in the handler", s.svc.in.Load())
		}
		return nil
	})
	close(s.svc.release)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

// TestGateHTTP2CallsDoNotQueueBehindWaiters: an HTTP/1 call waiting for
// room in the server's pool does not make an HTTP/2 call that fits be
// refused (it takes what it finds, waiting for nothing).
func TestGateHTTP2CallsDoNotQueueBehindWaiters(t *testing.T) {
	t.Parallel()
	cfg := Defaults(1 << 20)
	cfg.ServerBytes, cfg.PrincipalBytes, cfg.ConnBytes, cfg.BinaryFactor, cfg.Wait = 2<<20, 2<<20, 2<<20, 2, time.Minute
	s := start(t, cfg)
	errs := make(chan error, 3)
	// a holds 1 MiB; c's call waits for room the server's pool lacks
	// (1 + 1.5 MiB of 2), though its own pool has it.
	go func() {
		_, err := s.http1Client("tenant-a").Produce(context.Background(), produce(512<<10-64))
		errs <- err
	}()
	testenv.Wait(t, 30*time.Second, "a's first call in", func() error {
		if s.svc.in.Load() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	go func() {
		_, err := s.http1Client("tenant-c").Produce(context.Background(), produce(768<<10))
		errs <- err
	}()
	testenv.Wait(t, 30*time.Second, "c's call waiting", func() error {
		if s.waiters() != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	// b's small HTTP/2 call fits beside a's first: it goes in.
	go func() { _, err := s.client("tenant-b").Produce(context.Background(), produce(1000)); errs <- err }()
	testenv.Wait(t, 30*time.Second, "b's call in", func() error {
		if s.svc.in.Load() != 2 {
			return fmt.Errorf("%d in the handler", s.svc.in.Load())
		}
		return nil
	})
	close(s.svc.release)
	for range 3 {
		require.NoError(t, <-errs)
	}
}
