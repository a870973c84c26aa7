package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicemq/sluice/controlplane/store"
)

const signingKeyColumns = `kid, private, created_at, retired_at`

func scanSigningKey(r pgx.Row) (store.SigningKey, error) {
	var (
		k       store.SigningKey
		retired pgtype.Timestamptz
	)
	if err := r.Scan(&k.KID, &k.Private, &k.CreatedAt, &retired); err != nil {
		return store.SigningKey{}, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.RetiredAt = fromNullTS(retired)
	return k, nil
}

// InsertSigningKey implements store.Store. A zero CreatedAt is stored as now.
func (s *Store) InsertSigningKey(ctx context.Context, k store.SigningKey) error {
	_, err := s.pool.Exec(ctx,
		`INSERT INTO signing_keys (`+signingKeyColumns+`) VALUES ($1, $2, $3, $4)`,
		k.KID, nonNil(k.Private), ts(orNow(k.CreatedAt)), nullTS(k.RetiredAt))
	return translate("insert signing key", err)
}

// ListSigningKeys implements store.Store, ordered by (CreatedAt, KID).
func (s *Store) ListSigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+signingKeyColumns+` FROM signing_keys ORDER BY created_at, kid`)
	if err != nil {
		return nil, translate("list signing keys", err)
	}
	return collect(rows, scanSigningKey, "list signing keys")
}

// RetireSigningKey implements store.Store.
func (s *Store) RetireSigningKey(ctx context.Context, kid string, at time.Time) error {
	tag, err := s.pool.Exec(ctx,
		`UPDATE signing_keys SET retired_at = coalesce(retired_at, $1) WHERE kid = $2`, ts(at), kid)
	return translate("retire signing key", mustAffect(tag, err))
}

// DeleteSigningKey implements store.Store.
func (s *Store) DeleteSigningKey(ctx context.Context, kid string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM signing_keys WHERE kid = $1`, kid)
	return translate("delete signing key", mustAffect(tag, err))
}

// mustAffect turns "no row affected" into pgx.ErrNoRows.
func mustAffect(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return pgx.ErrNoRows
	}
	return nil
}
