package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const apiKeyColumns = `id, tenant_id, name, hash, scopes, created_at, revoked_at`

func scanAPIKey(r rowScanner) (store.APIKey, error) {
	var (
		k       store.APIKey
		scopes  string
		created int64
		revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.TenantID, &k.Name, &k.Hash, &scopes, &created, &revoked); err != nil {
		return store.APIKey{}, err
	}
	var err error
	if k.Scopes, err = decodeList[string](scopes); err != nil {
		return store.APIKey{}, err
	}
	k.CreatedAt = fromMS(created)
	k.RevokedAt = fromNullMS(revoked)
	return k, nil
}

// execer is *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func insertAPIKey(ctx context.Context, db execer, k store.APIKey) error {
	_, err := db.ExecContext(ctx,
		`INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.TenantID, k.Name, nonNil(k.Hash), encodeList(k.Scopes), toMS(orNow(k.CreatedAt)), nullMS(k.RevokedAt))
	return err
}

// CreateAPIKey implements store.Store. A zero CreatedAt is stored as now.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	id, ok := store.CanonicalID(k.TenantID)
	if !ok {
		return store.ErrNotFound
	}
	k.TenantID = id
	return translate("create api key", insertAPIKey(ctx, s.write, k))
}

// GetAPIKey implements store.Store.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanAPIKey(s.read.QueryRowContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = ?`, id))
	return k, translate("get api key", err)
}

// ListAPIKeys implements store.Store. Creation order is (CreatedAt, ID).
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id`, id)
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
	k, err := scanAPIKey(s.write.QueryRowContext(ctx,
		`UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE tenant_id = ? AND id = ? RETURNING `+apiKeyColumns,
		toMS(at), tid, id))
	return k, translate("revoke api key", err)
}

// ListRevokedAPIKeys implements store.Store, ordered by (RevokedAt, ID).
// since is compared at millisecond precision (truncated), so a key revoked in
// the same millisecond as since is included.
func (s *Store) ListRevokedAPIKeys(ctx context.Context, since time.Time) ([]store.APIKey, error) {
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+apiKeyColumns+` FROM api_keys WHERE revoked_at >= ? ORDER BY revoked_at, id`, toMS(since))
	if err != nil {
		return nil, translate("list revoked api keys", err)
	}
	return collect(rows, scanAPIKey, "list revoked api keys")
}
