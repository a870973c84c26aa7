package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// AcquireControllerLease implements store.Store in one write transaction
// (BEGIN IMMEDIATE), which serialises contenders of this process and, through
// the file lock, of others.
func (s *Store) AcquireControllerLease(ctx context.Context, holder string, now time.Time, ttl time.Duration) (store.ControllerLease, bool, error) {
	if err := store.CheckLeaseRequest(holder, ttl); err != nil {
		return store.ControllerLease{}, false, err
	}
	var (
		l        store.ControllerLease
		acquired bool
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		l, err = scanLease(tx.QueryRowContext(ctx,
			`UPDATE controller_lease SET
			     epoch = CASE WHEN holder = ?1 THEN epoch ELSE epoch + 1 END,
			     expires_at = CASE WHEN holder = ?1 THEN max(expires_at, ?3) ELSE ?3 END,
			     holder = ?1
			 WHERE id = 1 AND (holder = ?1 OR expires_at <= ?2)
			 RETURNING holder, epoch, expires_at`,
			holder, toMS(now), toMS(now.Add(ttl))))
		if err == nil {
			acquired = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		l, err = scanLease(tx.QueryRowContext(ctx, `SELECT holder, epoch, expires_at FROM controller_lease WHERE id = 1`))
		return err
	})
	if err != nil {
		return store.ControllerLease{}, false, translate("acquire controller lease", err)
	}
	return l, acquired, nil
}

func scanLease(r rowScanner) (store.ControllerLease, error) {
	var (
		l       store.ControllerLease
		expires int64
	)
	if err := r.Scan(&l.Holder, &l.Epoch, &expires); err != nil {
		return store.ControllerLease{}, err
	}
	l.ExpiresAt = fromMS(expires)
	return l, nil
}

// MetadataVersion implements store.Store.
func (s *Store) MetadataVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.read.QueryRowContext(ctx, `SELECT version FROM metadata_version WHERE id = 1`).Scan(&v)
	return v, translate("metadata version", err)
}
