package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

type tenantService struct{ *API }

// Signup counts every call, whatever its outcome, against the client
// address's signup limit: probing which names or emails are taken costs
// as much as signing up.
func (s *tenantService) Signup(ctx context.Context, req *connect.Request[sluicev1.SignupRequest]) (*connect.Response[sluicev1.SignupResponse], error) {
	client := s.clientKey(req)
	if ok, wait := s.signups.Take(client, s.now()); !ok {
		s.logger.InfoContext(ctx, "signup refused: client over the signup limit", "client", client, "retry_after", wait)
		return nil, tooMany("signups", wait)
	}
	email, err := NormalizeEmail(req.Msg.GetEmail())
	if err != nil {
		return nil, err
	}
	if err := ValidateTenantName(req.Msg.GetTenantName()); err != nil {
		return nil, err
	}
	nk, err := tenants.GenerateAPIKey()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	t := store.Tenant{
		ID:        store.NewID(),
		Name:      req.Msg.GetTenantName(),
		Email:     email,
		Plan:      tenants.PlanFree,
		Status:    store.TenantActive,
		CreatedAt: now,
	}
	k := store.APIKey{
		ID:        nk.ID,
		TenantID:  t.ID,
		Name:      "default",
		Hash:      nk.Hash,
		Scopes:    tenants.AllScopes(),
		CreatedAt: now,
	}
	err = s.store.CreateTenant(ctx, t, k)
	var taken *store.AlreadyExistsError
	if errors.As(err, &taken) {
		// The caller learns only that something is taken; the log says what.
		s.logger.InfoContext(ctx, "signup refused: already registered", "name", t.Name, "taken", taken.What, "client", client)
		return nil, errSignupTaken()
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "tenant signed up", "tenant", t.ID, "name", t.Name, "client", client)
	tpb, err := toTenantPB(t)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.SignupResponse{
		Tenant:       tpb,
		ApiKey:       toAPIKeyPB(k),
		ApiKeySecret: nk.Secret,
	}), nil
}

func (s *tenantService) GetTenant(ctx context.Context, _ *connect.Request[sluicev1.GetTenantRequest]) (*connect.Response[sluicev1.GetTenantResponse], error) {
	_, t, err := s.tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	u, err := s.store.TenantUsage(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	tpb, err := toTenantPB(t)
	if err != nil {
		return nil, err
	}
	usage, err := s.holdings(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	usage.Topics, usage.Partitions = u.Topics, u.Partitions
	usage.Values[limit.MaxTopics.String()] = float64(u.Topics)
	usage.Values[limit.MaxPartitions.String()] = float64(u.Partitions)
	return connect.NewResponse(&sluicev1.GetTenantResponse{Tenant: tpb, Usage: usage}), nil
}

// holdings is what the tenant holds and is admitted now, from the brokers'
// fresh quota reports (controlplane/quota) and its cold bytes.
func (s *tenantService) holdings(ctx context.Context, tenantID string) (*sluicev1.Usage, error) {
	now := s.now().UTC()
	stored, err := s.store.ListQuotaReports(ctx, []string{tenantID}, now.Add(-quotaConfig.Fresh))
	if err != nil {
		return nil, err
	}
	reports := make([]quota.Report, 0, len(stored))
	for _, r := range stored {
		reports = append(reports, fromStoreReport(r))
	}
	cold, err := s.cold.get(ctx, s.store, now)
	if err != nil {
		return nil, err
	}
	h := quota.Sum(quotaConfig.FreshReports(reports, now), cold[tenantID])
	u := &sluicev1.Usage{
		StorageBytes:       h.StorageBytes(),
		HotStorageBytes:    h.HotStorageBytes,
		ColdStorageBytes:   h.ColdStorageBytes,
		Groups:             h.Groups,
		TransactionalIds:   h.TransactionalIDs,
		ProduceBytesPerSec: h.Admitted[limit.ProduceBytes],
		FetchBytesPerSec:   h.Admitted[limit.FetchBytes],
		RequestsPerSec:     h.Admitted[limit.Requests],
		ProducerIdsPerHour: limit.ProducerIDsPerHour.Def().FromPerSecond(h.Admitted[limit.ProducerIDs]),
		Values: map[string]float64{
			limit.MaxTotalStorageBytes.String(): float64(h.StorageBytes()),
			limit.MaxGroups.String():            float64(h.Groups),
			limit.MaxTransactionalIDs.String():  float64(h.TransactionalIDs),
		},
	}
	// Every rate, admitted over the brokers, in its limit's unit.
	for d := range limit.Dimensions {
		l := d.Limit()
		u.Values[l.String()] = l.Def().FromPerSecond(h.Admitted[d])
	}
	return u, nil
}

type authService struct{ *API }

// CreateToken spends one of the client address's bad-key calls only when
// the key is bad (malformed, unknown, wrong, revoked: InvalidArgument or
// Unauthenticated), however many calls are in flight: each reserves one
// before its key is checked, waiting while checks of its address hold the
// rest, and a good key gives it back (keyChecks). An address out of
// bad-key calls is refused before its key is checked: a guess cannot be
// tested while it waits.
func (s *authService) CreateToken(ctx context.Context, req *connect.Request[sluicev1.CreateTokenRequest]) (_ *connect.Response[sluicev1.CreateTokenResponse], err error) {
	client := s.clientKey(req)
	settle, wait, err := s.tokenFailures.begin(ctx, client)
	switch {
	case err != nil:
		return nil, err
	case settle == nil:
		s.logger.InfoContext(ctx, "token refused: client over the bad API key limit", "client", client, "retry_after", wait)
		return nil, tooMany("CreateToken calls with a bad API key", wait)
	}
	defer func() { settle(badKey(err)) }()
	return s.createToken(ctx, req)
}

// badKey reports whether CreateToken refused the key itself.
func badKey(err error) bool {
	var fe *fieldError
	c := connect.CodeOf(err)
	return errors.As(err, &fe) || c == connect.CodeUnauthenticated || c == connect.CodeInvalidArgument
}

func (s *authService) createToken(ctx context.Context, req *connect.Request[sluicev1.CreateTokenRequest]) (*connect.Response[sluicev1.CreateTokenResponse], error) {
	secret := req.Msg.GetApiKey()
	if secret == "" {
		return nil, invalid("api_key", "must not be empty")
	}
	id, err := tenants.ParseAPIKey(secret)
	if err != nil {
		return nil, unauthenticated("invalid API key: %v", err)
	}
	k, err := s.store.GetAPIKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !tenants.CheckAPIKey(secret, k.Hash)) {
		return nil, unauthenticated("invalid API key")
	}
	if err != nil {
		return nil, err
	}
	if k.Revoked() {
		return nil, unauthenticated("API key %s was revoked", k.ID)
	}
	t, err := s.store.GetTenant(ctx, k.TenantID)
	if err != nil {
		return nil, err
	}
	if t.Status != store.TenantActive {
		return nil, permissionDenied("tenant %s is %s", t.Name, t.Status)
	}
	tok, exp, err := s.issuer.Mint(s.now(), tenants.Principal{
		Kind:     tenants.PrincipalTenant,
		TenantID: t.ID,
		APIKeyID: k.ID,
		Scopes:   k.Scopes,
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.CreateTokenResponse{
		Token:      tok,
		TokenType:  "Bearer",
		ExpireTime: ts(exp),
		TenantId:   t.ID,
		TenantName: t.Name,
		Scopes:     k.Scopes,
	}), nil
}

type apiKeyService struct{ *API }

func (s *apiKeyService) CreateAPIKey(ctx context.Context, req *connect.Request[sluicev1.CreateAPIKeyRequest]) (*connect.Response[sluicev1.CreateAPIKeyResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	if err := ValidateLabel("name", req.Msg.GetName()); err != nil {
		return nil, err
	}
	scopes := req.Msg.GetScopes()
	if len(scopes) == 0 {
		scopes = p.Scopes
	}
	if err := tenants.ValidateScopes(scopes); err != nil {
		return nil, invalid("scopes", "%v", err)
	}
	for _, sc := range scopes {
		if !p.Has(sc) {
			return nil, permissionDenied("cannot grant scope %q: the calling key does not have it", sc)
		}
	}
	nk, err := tenants.GenerateAPIKey()
	if err != nil {
		return nil, err
	}
	k := store.APIKey{
		ID:        nk.ID,
		TenantID:  p.TenantID,
		Name:      req.Msg.GetName(),
		Hash:      nk.Hash,
		Scopes:    scopes,
		CreatedAt: s.now().UTC(),
	}
	if err := s.store.CreateAPIKey(ctx, k); err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.CreateAPIKeyResponse{ApiKey: toAPIKeyPB(k), Secret: nk.Secret}), nil
}

func (s *apiKeyService) ListAPIKeys(ctx context.Context, _ *connect.Request[sluicev1.ListAPIKeysRequest]) (*connect.Response[sluicev1.ListAPIKeysResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.store.ListAPIKeys(ctx, p.TenantID)
	if err != nil {
		return nil, err
	}
	out := make([]*sluicev1.APIKey, len(keys))
	for i, k := range keys {
		out[i] = toAPIKeyPB(k)
	}
	return connect.NewResponse(&sluicev1.ListAPIKeysResponse{ApiKeys: out}), nil
}

func (s *apiKeyService) RevokeAPIKey(ctx context.Context, req *connect.Request[sluicev1.RevokeAPIKeyRequest]) (*connect.Response[sluicev1.RevokeAPIKeyResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetId()
	if id == "" {
		return nil, invalid("id", "must not be empty")
	}
	k, err := s.store.RevokeAPIKey(ctx, p.TenantID, id, s.now().UTC())
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("API key %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "API key revoked", "tenant", p.TenantID, "key", id)
	return connect.NewResponse(&sluicev1.RevokeAPIKeyResponse{ApiKey: toAPIKeyPB(k)}), nil
}
