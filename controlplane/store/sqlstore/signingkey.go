package sqlstore

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const signingKeyColumns = `kid, private, created_at, retired_at`

func scanSigningKey(r Scanner) (store.SigningKey, error) {
	var k store.SigningKey
	if err := r.Scan(&k.KID, &k.Private, ScanTime(&k.CreatedAt), ScanTime(&k.RetiredAt)); err != nil {
		return store.SigningKey{}, err
	}
	return k, nil
}

// InsertSigningKey implements store.Store. A zero CreatedAt is stored as now.
func (s *Store) InsertSigningKey(ctx context.Context, k store.SigningKey) error {
	_, err := s.db.Write().ExecContext(ctx,
		`INSERT INTO signing_keys (`+signingKeyColumns+`) VALUES ($1, $2, $3, $4)`,
		k.KID, nonNil(k.Private), s.db.Time(orNow(k.CreatedAt)), s.db.NullTime(k.RetiredAt))
	return s.db.Translate("insert signing key", err)
}

// ListSigningKeys implements store.Store, ordered by (CreatedAt, KID).
func (s *Store) ListSigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+signingKeyColumns+` FROM signing_keys ORDER BY created_at, kid`)
	return Collect(s.db, rows, err, scanSigningKey, "list signing keys")
}

// RetireSigningKey implements store.Store.
func (s *Store) RetireSigningKey(ctx context.Context, kid string, at time.Time) error {
	res, err := s.db.Write().ExecContext(ctx,
		`UPDATE signing_keys SET retired_at = coalesce(retired_at, $1) WHERE kid = $2`, s.db.Time(at), kid)
	return s.db.Translate("retire signing key", MustAffect(res, err))
}

// DeleteSigningKey implements store.Store.
func (s *Store) DeleteSigningKey(ctx context.Context, kid string) error {
	res, err := s.db.Write().ExecContext(ctx, `DELETE FROM signing_keys WHERE kid = $1`, kid)
	return s.db.Translate("delete signing key", MustAffect(res, err))
}
