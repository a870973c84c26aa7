package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// AcquireControllerLease implements store.Store with one UPDATE of the
// single lease row: concurrent contenders serialise on it (Postgres: they
// queue on its row lock and each re-checks the WHERE clause against the row
// the previous one committed; SQLite: the database's write lock, across
// processes through the file lock), so at most one takes an expired lease.
// A contender that did not take it reads the lease as it is.
func (s *Store) AcquireControllerLease(ctx context.Context, holder string, now time.Time, ttl time.Duration) (store.ControllerLease, bool, error) {
	if err := store.CheckLeaseRequest(holder, ttl); err != nil {
		return store.ControllerLease{}, false, err
	}
	l, err := scanLease(s.db.WriteIn(LaneUrgent).QueryRowContext(ctx,
		`UPDATE controller_lease SET
		     epoch = CASE WHEN holder = $1 THEN epoch ELSE epoch + 1 END,
		     expires_at = CASE WHEN holder = $1 THEN `+s.db.Greatest()+`(expires_at, $3) ELSE $3 END,
		     holder = $1
		 WHERE id = 1 AND (holder = $1 OR expires_at <= $2)
		 RETURNING holder, epoch, expires_at`,
		holder, s.db.Time(now), s.db.Time(now.Add(ttl))))
	if err == nil {
		return l, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return store.ControllerLease{}, false, s.db.Translate("acquire controller lease", err)
	}
	l, err = scanLease(s.db.Read().QueryRowContext(ctx, `SELECT holder, epoch, expires_at FROM controller_lease WHERE id = 1`))
	return l, false, s.db.Translate("acquire controller lease", err)
}

func scanLease(r Scanner) (store.ControllerLease, error) {
	var l store.ControllerLease
	if err := r.Scan(&l.Holder, &l.Epoch, ScanTime(&l.ExpiresAt)); err != nil {
		return store.ControllerLease{}, err
	}
	return l, nil
}

// MetadataVersion implements store.Store.
func (s *Store) MetadataVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.Read().QueryRowContext(ctx, `SELECT version FROM metadata_version WHERE id = 1`).Scan(&v)
	return v, s.db.Translate("metadata version", err)
}

// checkLease reads the controller lease's epoch in tx, FOR SHARE (a
// takeover, an UPDATE of the row, waits until tx commits, and a write after
// the takeover sees the new epoch), and fails with store.ErrFenced unless
// it is epoch. Its errors are untranslated.
func (s *Store) checkLease(ctx context.Context, tx *sql.Tx, epoch int64) error {
	var cur int64
	if err := tx.QueryRowContext(ctx, `SELECT epoch FROM controller_lease WHERE id = 1`+s.db.Lock(LockShare)).Scan(&cur); err != nil {
		return err
	}
	if cur != epoch {
		return store.ErrFenced
	}
	return nil
}
