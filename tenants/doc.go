// Package tenants holds what Sluice knows about a tenant's identity and entitlements: plans and
// quotas, API keys, scopes, JWT issuing and verification, JWKS, and the Connect auth interceptor
// shared by the control plane and the brokers, with the access rule of every procedure. It is a
// leaf: it imports only the standard library, golang-jwt, connect, uuid, protobuf, gen (the
// services' access options) and limit (the limit table), and does no I/O except JWKSCache's
// HTTP fetches.
//
// # Plans and limits
//
// A tenant is on a plan (PlanFree, PlanPro) whose Limits are the defaults; per-tenant Overrides
// (JSON keyed by the limits' names, only what differs) replace single limits:
// ResolveLimits(plan, overrides). The limits, their plan defaults and their ranges are one
// table, package limit; Limits and Overrides are its Values and Overrides. Count limits
// (topics, partitions, storage, retention, message size) are enforced by the control plane and
// reported as *LimitError; byte and request rates are enforced per tenant by every broker with
// token buckets.
//
// # API keys
//
// An API key is "slk_" + key id (16 lowercase hex, public, the store's primary key) + "_" +
// 32 random bytes (base64url) + a CRC-32 checksum (6 base64url chars), so ParseAPIKey rejects
// typos and foreign strings without a store lookup. The secret is shown once; the store keeps
// only HashAPIKey (SHA-256: the secret has 256 bits of entropy, see HashAPIKey for why not
// bcrypt), compared in constant time by CheckAPIKey. A key carries scopes (ScopeAdmin,
// ScopeProduce, ScopeConsume).
//
// # Tokens
//
// The control plane exchanges an API key for a short-lived JWT (Issuer.Mint, DefaultTokenTTL
// 15 minutes): EdDSA (Ed25519) only, header "kid", claims iss, aud, sub "apikey:<key id>", iat,
// nbf, exp, jti (UUIDv7), tid (tenant id), scp (scopes), akid (key id). The tenant of every
// request comes from the token and nowhere else.
//
// A Verifier accepts a token only if all of these hold:
//   - it is at most MaxTokenBytes long (checked before parsing; CVE-2025-30204);
//   - alg is EdDSA ("none", HMAC, RSA and ECDSA are refused before any key is looked up);
//   - the header has a non-empty string kid, resolved only through the configured KeySource —
//     the pinned JWKS URL on brokers, the Issuer's own key set on the control plane. jku, x5u
//     and jwk headers are ignored; a crit header is refused;
//   - the Ed25519 signature verifies with that key;
//   - iss and aud match; exp is present and not past; nbf and iat, when present, are not in the
//     future — all within the leeway (DefaultLeeway 5s, at most MaxLeeway 30s);
//   - tid is non-empty, scp is a valid scope list, and sub is "apikey:" + akid.
//
// Every refusal wraps ErrInvalidToken with a short reason and maps to Unauthenticated.
//
// A Verifier with VerifierConfig.CacheSize remembers tokens that passed all of the above (a
// bounded LRU keyed by the whole token string) and accepts one again without the signature check
// only while the clock is before its exp — no leeway — and the KeySource still returns the same
// key for its kid. Brokers use it; refused tokens are never remembered.
//
// # Key rotation
//
// The signing keys live in the control plane's store and reach the Issuer through SetKeys (hot
// swap, any number of control-plane replicas). The newest key whose CreatedAt has passed and
// that is not retired signs. Rotation: add a new key (optionally with CreatedAt a little in the
// future, so brokers see it in JWKS before any token uses it), then set RetiredAt on the old
// one. A retired key stays in JWKS, and trusted, until RetiredAt + TokenTTL + MaxLeeway, after
// which every token it signed has expired; then it disappears. Brokers refresh their JWKSCache
// periodically and refetch, rate limited, when they meet an unknown kid. A compromised key is
// removed from the set rather than retired: the control plane stops trusting it at once and
// brokers at their next refresh.
//
// # Revocation
//
// A JWT cannot be recalled; its short TTL bounds the damage. On top of that: the control plane
// checks, on every request, that the API key behind the credential (an API key, or a token's
// akid) is not revoked in its store and that its tenant is not suspended. Brokers verify offline
// from the cached JWKS and cannot ask the store per request; they poll the control plane's
// revocation feed (revoked API key ids, and the whole set of suspended tenants) every few
// seconds and refuse tokens whose akid or tid is on it, so a revoked key or a suspended tenant
// stops working on brokers within one poll interval (dataplane/broker).
//
// # Interceptor
//
// NewAuthInterceptor authenticates every server-side call — unary and streaming, over Connect,
// gRPC and gRPC-Web alike — through an Authenticator before the handler runs and stores the
// Principal in the context (PrincipalFrom). Public procedures get a PrincipalAnonymous. A stream
// ends with Unauthenticated when its token expires. Handlers check scopes with
// Principal.Require.
//
// # Access rules
//
// Who may call each procedure (public, a tenant with scopes, the operator, a broker) and which
// servers serve it is declared on the RPC itself, with the (sluice.v1.access) method option of
// proto/sluice/v1/access.proto. AccessRules reads the options of every service of sluice.v1 from
// the compiled descriptors; the control plane's and the brokers' Authenticators use its answer
// for their server, so both read one declaration. A procedure without a well-formed option is an
// error (MustAccessRules panics at start; TestAccessEveryRPCHasARule fails first).
//
// # Concurrency
//
// Issuer, Verifier, JWKSCache and the interceptor are safe for concurrent use. JWKSCache.Run is a
// background loop owned by the caller's goroutine and stops when its context is done; fetches
// are serialised by one mutex, taken before the key-set lock.
package tenants
