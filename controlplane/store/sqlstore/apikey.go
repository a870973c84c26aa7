package sqlstore

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const apiKeyColumns = `id, tenant_id, name, hash, scopes, created_at, revoked_at`

func scanAPIKey(r Scanner) (store.APIKey, error) {
	var k store.APIKey
	if err := r.Scan(&k.ID, &k.TenantID, &k.Name, &k.Hash, ScanStrings(&k.Scopes), ScanTime(&k.CreatedAt), ScanTime(&k.RevokedAt)); err != nil {
		return store.APIKey{}, err
	}
	return k, nil
}

func (s *Store) insertAPIKey(ctx context.Context, q Querier, k store.APIKey) error {
	_, err := q.ExecContext(ctx,
		`INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		k.ID, k.TenantID, k.Name, nonNil(k.Hash), s.db.Strings(k.Scopes), s.db.Time(orNow(k.CreatedAt)), s.db.NullTime(k.RevokedAt))
	return err
}

// CreateAPIKey implements store.Store. A zero CreatedAt is stored as now.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	id, ok := store.CanonicalID(k.TenantID)
	if !ok {
		return store.ErrNotFound
	}
	k.TenantID = id
	return s.db.Translate("create api key", s.insertAPIKey(ctx, s.db.Write(), k))
}

// GetAPIKey implements store.Store.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.db.Read().QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id))
	return k, s.db.Translate("get api key", err)
}

// ListAPIKeys implements store.Store. Creation order is (CreatedAt, ID).
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id`, id)
	return Collect(s.db, rows, err, scanAPIKey, "list api keys")
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) (store.APIKey, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.APIKey{}, store.ErrNotFound
	}
	k, err := scanAPIKey(s.db.Write().QueryRowContext(ctx,
		`UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE tenant_id = $2 AND id = $3 RETURNING `+apiKeyColumns,
		s.db.Time(at), tid, id))
	return k, s.db.Translate("revoke api key", err)
}

// ListRevokedAPIKeys implements store.Store, ordered by (RevokedAt, ID).
// since is compared at millisecond precision (truncated), so a key revoked in
// the same millisecond as since is included.
func (s *Store) ListRevokedAPIKeys(ctx context.Context, since time.Time) ([]store.APIKey, error) {
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE revoked_at >= $1 ORDER BY revoked_at, id`, s.db.Time(since))
	return Collect(s.db, rows, err, scanAPIKey, "list revoked api keys")
}
