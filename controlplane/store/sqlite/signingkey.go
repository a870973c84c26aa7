package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const signingKeyColumns = `kid, private, created_at, retired_at`

func scanSigningKey(r rowScanner) (store.SigningKey, error) {
	var (
		k       store.SigningKey
		created int64
		retired sql.NullInt64
	)
	if err := r.Scan(&k.KID, &k.Private, &created, &retired); err != nil {
		return store.SigningKey{}, err
	}
	k.CreatedAt = fromMS(created)
	k.RetiredAt = fromNullMS(retired)
	return k, nil
}

// InsertSigningKey implements store.Store. A zero CreatedAt is stored as now.
func (s *Store) InsertSigningKey(ctx context.Context, k store.SigningKey) error {
	_, err := s.write.ExecContext(ctx,
		`INSERT INTO signing_keys (`+signingKeyColumns+`) VALUES (?, ?, ?, ?)`,
		k.KID, nonNil(k.Private), toMS(orNow(k.CreatedAt)), nullMS(k.RetiredAt))
	return translate("insert signing key", err)
}

// ListSigningKeys implements store.Store, ordered by (CreatedAt, KID).
func (s *Store) ListSigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+signingKeyColumns+` FROM signing_keys ORDER BY created_at, kid`)
	if err != nil {
		return nil, translate("list signing keys", err)
	}
	return collect(rows, scanSigningKey, "list signing keys")
}

// RetireSigningKey implements store.Store.
func (s *Store) RetireSigningKey(ctx context.Context, kid string, at time.Time) error {
	res, err := s.write.ExecContext(ctx,
		`UPDATE signing_keys SET retired_at = coalesce(retired_at, ?) WHERE kid = ?`, toMS(at), kid)
	return translate("retire signing key", mustAffect(res, err))
}

// DeleteSigningKey implements store.Store.
func (s *Store) DeleteSigningKey(ctx context.Context, kid string) error {
	res, err := s.write.ExecContext(ctx, `DELETE FROM signing_keys WHERE kid = ?`, kid)
	return translate("delete signing key", mustAffect(res, err))
}

// mustAffect turns "no row affected" into sql.ErrNoRows.
func mustAffect(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return sql.ErrNoRows
	}
	return nil
}
