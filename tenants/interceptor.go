package tenants

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"
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
		if _, ok := preauthenticated(ctx); ok {
			return next(ctx, req)
		}
		p, err := i.auth.Authenticate(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, authError(err)
		}
		return next(WithPrincipal(ctx, p), req)
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
