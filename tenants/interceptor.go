package tenants

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ErrMissingCredentials means a request to a non-public procedure carried no credentials.
var ErrMissingCredentials = errors.New("missing credentials")

// ErrUnknownProcedure is an Authenticator's answer for a procedure it has no rule for: nobody may
// call it. It wraps ErrPermissionDenied.
var ErrUnknownProcedure = fmt.Errorf("%w: unknown procedure", ErrPermissionDenied)

// Authenticator decides who calls a procedure. The control plane's implementation accepts API
// keys and JWTs and checks the API key's revocation in its store; brokers use a TokenAuthenticator.
type Authenticator interface {
	// Authenticate returns the caller for a procedure ("/sluice.v1.TopicService/CreateTopic")
	// given request headers. It returns a Principal with Kind PrincipalAnonymous for public
	// procedures, and an error wrapping ErrMissingCredentials, ErrInvalidToken, ErrUnknownKey,
	// ErrMalformedAPIKey or ErrPermissionDenied to refuse the call.
	Authenticate(ctx context.Context, procedure string, h http.Header) (Principal, error)
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header (scheme
// case-insensitive). No header is ErrMissingCredentials; a header over MaxTokenBytes, several
// Authorization headers, another scheme or an empty token wrap ErrInvalidToken.
func BearerToken(h http.Header) (string, error) {
	values := h.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", ErrMissingCredentials
	case len(values) > 1:
		return "", invalidToken("more than one authorization header")
	case len(values[0]) > MaxTokenBytes+len("Bearer "):
		return "", invalidToken("token too large")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", invalidToken("authorization scheme must be Bearer")
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return "", invalidToken("empty bearer token")
	}
	return token, nil
}

// TokenAuthenticator authenticates every procedure except the public ones with a bearer JWT
// checked by a Verifier. It is what brokers use: they verify offline and never see API keys.
type TokenAuthenticator struct {
	verifier *Verifier
	public   map[string]bool
}

// NewTokenAuthenticator returns an Authenticator that lets the listed procedures through as
// PrincipalAnonymous and requires a valid token everywhere else.
func NewTokenAuthenticator(v *Verifier, publicProcedures ...string) *TokenAuthenticator {
	public := make(map[string]bool, len(publicProcedures))
	for _, p := range publicProcedures {
		public[p] = true
	}
	return &TokenAuthenticator{verifier: v, public: public}
}

// Authenticate implements Authenticator.
func (a *TokenAuthenticator) Authenticate(ctx context.Context, procedure string, h http.Header) (Principal, error) {
	if a.public[procedure] {
		return Principal{Kind: PrincipalAnonymous}, nil
	}
	token, err := BearerToken(h)
	if err != nil {
		return Principal{}, err
	}
	if strings.HasPrefix(token, APIKeyPrefix) {
		return Principal{}, invalidToken("api keys are not accepted here: exchange the key for a token at the control plane")
	}
	return a.verifier.Verify(ctx, token)
}

// NewAuthInterceptor returns a Connect interceptor that authenticates every server-side call,
// unary and streaming, before its handler runs, and puts the Principal in the handler's context
// (PrincipalFrom). Client-side calls pass through untouched. Refusals become Connect errors:
// ErrMissingCredentials, ErrInvalidToken, ErrUnknownKey, ErrMalformedAPIKey → Unauthenticated
// with the reason; ErrPermissionDenied → PermissionDenied; a *connect.Error as is; anything
// else → Internal "internal error" (the cause stays reachable with errors.Unwrap for server-side
// logging, but is never sent). A stream whose principal has an ExpiresAt is cancelled at that
// time and ends with Unauthenticated "token expired": clients reconnect with a fresh token.
func NewAuthInterceptor(a Authenticator) connect.Interceptor {
	return &authInterceptor{auth: a}
}

type authInterceptor struct {
	auth Authenticator
}

func (i *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		p, ok := preauthenticated(ctx)
		if !ok {
			var err error
			if p, err = i.auth.Authenticate(ctx, req.Spec().Procedure, req.Header()); err != nil {
				return nil, authError(err)
			}
			ctx = WithPrincipal(ctx, p)
		}
		if err := checkNamedBroker(p, req.Any()); err != nil {
			return nil, authError(err)
		}
		return next(ctx, req)
	}
}

func (i *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// errStreamTokenExpired is the cancellation cause of a stream that outlived its token.
var errStreamTokenExpired = errors.New("token expired during stream")

func (i *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if conn.Spec().IsClient {
			return next(ctx, conn)
		}
		p, ok := preauthenticated(ctx)
		if !ok {
			var err error
			if p, err = i.auth.Authenticate(ctx, conn.Spec().Procedure, conn.RequestHeader()); err != nil {
				return authError(err)
			}
			ctx = WithPrincipal(ctx, p)
		}
		if p.Peer != "" {
			conn = namedBrokerConn{StreamingHandlerConn: conn, p: p}
		}
		if p.ExpiresAt.IsZero() {
			return next(ctx, conn)
		}
		ctx, cancel := context.WithDeadlineCause(ctx, p.ExpiresAt, errStreamTokenExpired)
		defer cancel()
		err := next(ctx, conn)
		if err != nil && errors.Is(context.Cause(ctx), errStreamTokenExpired) {
			return connect.NewError(connect.CodeUnauthenticated, invalidToken("token expired"))
		}
		return err
	}
}

// namedBrokerFields are the fields of a request that name the broker
// making it (BrokerService's broker_id, ReplicaService's follower_id).
var namedBrokerFields = []protoreflect.Name{"broker_id", "follower_id"}

// checkNamedBroker refuses a call from a server of the cluster whose
// message names a broker (namedBrokerFields, at its top level) other than
// the one its certificate proved it is (Principal.Peer): with mutual TLS
// inside the cluster, a broker's certificate cannot register, heartbeat,
// report or fetch as another broker, nor the control plane's as any.
func checkNamedBroker(p Principal, msg any) error {
	if p.Peer == "" {
		return nil
	}
	m, ok := msg.(proto.Message)
	if !ok {
		return nil
	}
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for _, name := range namedBrokerFields {
		fd := fields.ByName(name)
		if fd == nil || fd.Kind() != protoreflect.Int32Kind || fd.Cardinality() == protoreflect.Repeated {
			continue
		}
		if id := int32(r.Get(fd).Int()); p.Peer != BrokerIdentity(id) {
			return fmt.Errorf("%w: the call is broker %d's but its TLS certificate is %s's", ErrPermissionDenied, id, p.Peer)
		}
	}
	return nil
}

// BrokerIdentity is broker id's identity in its cluster certificate
// (internal/tlsfiles.BrokerURI).
func BrokerIdentity(id int32) string { return fmt.Sprintf("sluice://broker/%d", id) }

// namedBrokerConn checks each message a stream receives with
// checkNamedBroker.
type namedBrokerConn struct {
	connect.StreamingHandlerConn
	p Principal
}

func (c namedBrokerConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if err := checkNamedBroker(c.p, msg); err != nil {
		return authError(err)
	}
	return nil
}

type preauthKey struct{}

// Preauthenticated returns ctx carrying p as the caller that an HTTP
// middleware authenticated from the request's headers before reading its
// body (internal/httpgate). The auth interceptor takes it as is rather
// than authenticating the call again. Only a server's own middleware may
// call it, with what an Authenticator returned for that very request.
func Preauthenticated(ctx context.Context, p Principal) context.Context {
	return context.WithValue(WithPrincipal(ctx, p), preauthKey{}, true)
}

func preauthenticated(ctx context.Context) (Principal, bool) {
	if ctx.Value(preauthKey{}) == nil {
		return Principal{}, false
	}
	return PrincipalFrom(ctx)
}

// AuthConnectError maps an Authenticator's refusal to the Connect error
// the auth interceptor answers (see NewAuthInterceptor).
func AuthConnectError(err error) error { return authError(err) }

// authError maps an Authenticator error to a Connect error.
func authError(err error) error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.Is(err, ErrMissingCredentials), errors.Is(err, ErrInvalidToken),
		errors.Is(err, ErrUnknownKey), errors.Is(err, ErrMalformedAPIKey):
		return connect.NewError(connect.CodeUnauthenticated, err)
	case errors.Is(err, ErrPermissionDenied):
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	return connect.NewError(connect.CodeInternal, &internalError{cause: err})
}

// internalError hides its cause from the wire (Connect sends Error()) but keeps it for logs.
type internalError struct{ cause error }

func (e *internalError) Error() string { return "internal error" }
func (e *internalError) Unwrap() error { return e.cause }
