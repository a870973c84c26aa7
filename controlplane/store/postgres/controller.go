package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/controlplane/store"
)

// AcquireControllerLease implements store.Store with one UPDATE of the
// single lease row: concurrent contenders queue on its row lock and each
// re-checks the WHERE clause against the row the previous one committed, so
// at most one takes an expired lease.
func (s *Store) AcquireControllerLease(ctx context.Context, holder string, now time.Time, ttl time.Duration) (store.ControllerLease, bool, error) {
	if err := store.CheckLeaseRequest(holder, ttl); err != nil {
		return store.ControllerLease{}, false, err
	}
	l, err := scanLease(s.pool.QueryRow(ctx,
		`UPDATE controller_lease SET
		     epoch = CASE WHEN holder = $1 THEN epoch ELSE epoch + 1 END,
		     expires_at = CASE WHEN holder = $1 THEN greatest(expires_at, $3) ELSE $3 END,
		     holder = $1
		 WHERE id = 1 AND (holder = $1 OR expires_at <= $2)
		 RETURNING holder, epoch, expires_at`,
		holder, ts(now), ts(now.Add(ttl))))
	if err == nil {
		return l, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return store.ControllerLease{}, false, translate("acquire controller lease", err)
	}
	l, err = scanLease(s.pool.QueryRow(ctx, `SELECT holder, epoch, expires_at FROM controller_lease WHERE id = 1`))
	return l, false, translate("acquire controller lease", err)
}

func scanLease(r pgx.Row) (store.ControllerLease, error) {
	var l store.ControllerLease
	if err := r.Scan(&l.Holder, &l.Epoch, &l.ExpiresAt); err != nil {
		return store.ControllerLease{}, err
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
}

// MetadataVersion implements store.Store.
func (s *Store) MetadataVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT version FROM metadata_version WHERE id = 1`).Scan(&v)
	return v, translate("metadata version", err)
}
