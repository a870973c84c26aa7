package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicemq/sluice/controlplane/store"
)

const apiKeyColumns = `id, tenant_id, name, hash, scopes, created_at, revoked_at`

func scanAPIKey(r pgx.Row) (store.APIKey, error) {
	var (
		k       store.APIKey
		revoked pgtype.Timestamptz
	)
	if err := r.Scan(&k.ID, &k.TenantID, &k.Name, &k.Hash, &k.Scopes, &k.CreatedAt, &revoked); err != nil {
		return store.APIKey{}, err
	}
	k.Scopes = nilIfEmpty(k.Scopes)
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = fromNullTS(revoked)
	return k, nil
}

// execer is the pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func insertAPIKey(ctx context.Context, db execer, k store.APIKey) error {
	_, err := db.Exec(ctx,
		`INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		k.ID, k.TenantID, k.Name, nonNil(k.Hash), nonNilList(k.Scopes), ts(orNow(k.CreatedAt)), nullTS(k.RevokedAt))
	return err
}

// CreateAPIKey implements store.Store. A zero CreatedAt is stored as now.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	id, ok := store.CanonicalID(k.TenantID)
	if !ok {
		return store.ErrNotFound
	}
	k.TenantID = id
	return translate("create api key", insertAPIKey(ctx, s.pool, k))
}

// GetAPIKey implements store.Store.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`, id))
	return k, translate("get api key", err)
}

// ListAPIKeys implements store.Store. Creation order is (CreatedAt, ID).
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE tenant_id = $1 ORDER BY created_at, id`, id)
	if err != nil {
		return nil, translate("list api keys", err)
	}
	return collect(rows, scanAPIKey, "list api keys")
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) (store.APIKey, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.APIKey{}, store.ErrNotFound
	}
	k, err := scanAPIKey(s.pool.QueryRow(ctx,
		`UPDATE api_keys SET revoked_at = coalesce(revoked_at, $1) WHERE tenant_id = $2 AND id = $3 RETURNING `+apiKeyColumns,
		ts(at), tid, id))
	return k, translate("revoke api key", err)
}

// ListRevokedAPIKeys implements store.Store, ordered by (RevokedAt, ID).
// since is compared at millisecond precision (truncated), so a key revoked in
// the same millisecond as since is included.
func (s *Store) ListRevokedAPIKeys(ctx context.Context, since time.Time) ([]store.APIKey, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE revoked_at >= $1 ORDER BY revoked_at, id`, ts(since))
	if err != nil {
		return nil, translate("list revoked api keys", err)
	}
	return collect(rows, scanAPIKey, "list revoked api keys")
}
