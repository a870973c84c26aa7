package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// ---- webhooks ----

// webhookColumns leave the secret out: it is read only by ClaimDeliveries.
const webhookColumns = `id, tenant_id, url, description, created_at`

func scanWebhook(r Scanner) (store.Webhook, error) {
	var w store.Webhook
	if err := r.Scan(&w.ID, &w.TenantID, &w.URL, &w.Description, ScanTime(&w.CreatedAt)); err != nil {
		return store.Webhook{}, err
	}
	return w, nil
}

// CreateWebhook implements store.Store. The tenant row is locked (lockTenant,
// as CreateTopic does) from the count to the insert, so concurrent
// creations of one tenant never pass the limit.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook, secret []byte, maxPerTenant int) (store.Webhook, error) {
	w, err := store.CheckWebhook(w, secret)
	if err != nil {
		return store.Webhook{}, err
	}
	var out store.Webhook
	err = s.db.InTx(ctx, func(tx *sql.Tx) error {
		if err := s.lockTenant(ctx, tx, w.TenantID); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("tenant %s: %w", w.TenantID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM webhooks WHERE tenant_id = $1`, w.TenantID).Scan(&n); err != nil {
			return err
		}
		if maxPerTenant > 0 && n >= int64(maxPerTenant) {
			return &store.LimitError{Limit: "webhooks", Current: n, Request: 1, Max: int64(maxPerTenant)}
		}
		var err error
		out, err = scanWebhook(tx.QueryRowContext(ctx,
			`INSERT INTO webhooks (id, tenant_id, url, secret, description, created_at) VALUES ($1, $2, $3, $4, $5, $6)
			 RETURNING `+webhookColumns,
			w.ID, w.TenantID, w.URL, secret, w.Description, s.db.Time(orNow(w.CreatedAt))))
		return err
	})
	if err != nil {
		return store.Webhook{}, s.db.Translate("create webhook", err)
	}
	return out, nil
}

// GetWebhook implements store.Store.
func (s *Store) GetWebhook(ctx context.Context, tenantID, id string) (store.Webhook, error) {
	tid, ok1 := store.CanonicalID(tenantID)
	wid, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.Webhook{}, store.ErrNotFound
	}
	w, err := scanWebhook(s.db.Read().QueryRowContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1 AND tenant_id = $2`, wid, tid))
	if err != nil {
		return store.Webhook{}, s.db.Translate("get webhook", err)
	}
	return w, nil
}

// ListWebhooks implements store.Store.
func (s *Store) ListWebhooks(ctx context.Context, tenantID string) ([]store.Webhook, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id`, tid)
	return Collect(s.db, rows, err, scanWebhook, "list webhooks")
}

// DeleteWebhook implements store.Store; its deliveries go by ON DELETE CASCADE.
func (s *Store) DeleteWebhook(ctx context.Context, tenantID, id string) error {
	tid, ok1 := store.CanonicalID(tenantID)
	wid, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.ErrNotFound
	}
	res, err := s.db.Write().ExecContext(ctx, `DELETE FROM webhooks WHERE id = $1 AND tenant_id = $2`, wid, tid)
	return s.db.Translate("delete webhook", MustAffect(res, err))
}

// ---- deliveries ----

const deliveryColumns = `id, tenant_id, webhook_id, alert_id, alert_state, payload, status, attempts,
	next_attempt_at, last_error, created_at, delivered_at`

// insertDelivery inserts a pending delivery unless its (webhook, alert,
// state) is enqueued already.
const insertDelivery = `INSERT INTO webhook_deliveries (` + deliveryColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL)
	ON CONFLICT (webhook_id, alert_id, alert_state) DO NOTHING`

// deliveryArgs are insertDelivery's arguments for d (checked).
func (s *Store) deliveryArgs(d store.Delivery) []any {
	created := orNow(d.CreatedAt)
	next := created
	if !d.NextAttemptAt.IsZero() {
		next = d.NextAttemptAt
	}
	var alert sql.NullString
	if d.AlertID != "" {
		alert = sql.NullString{String: d.AlertID, Valid: true}
	}
	return []any{d.ID, d.TenantID, d.WebhookID, alert, string(d.AlertState), d.Payload, string(store.DeliveryPending), 0,
		s.db.Time(next), "", s.db.Time(created)}
}

func scanDelivery(r Scanner) (store.Delivery, error) { return scanDeliveryWith(r) }

// scanDeliveryWith scans a delivery followed by the extra columns.
func scanDeliveryWith(r Scanner, extra ...any) (store.Delivery, error) {
	var (
		d             store.Delivery
		alert         sql.NullString
		state, status string
	)
	dest := []any{&d.ID, &d.TenantID, &d.WebhookID, &alert, &state, &d.Payload, &status, &d.Attempts,
		ScanTime(&d.NextAttemptAt), &d.LastError, ScanTime(&d.CreatedAt), ScanTime(&d.DeliveredAt)}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return store.Delivery{}, err
	}
	d.AlertID = alert.String
	d.AlertState, d.Status = store.AlertState(state), store.DeliveryStatus(status)
	return d, nil
}

// EnqueueDelivery implements store.Store. The insert does nothing on a
// duplicate key, having waited for a concurrent insert of the same key to
// commit; the select that follows, a new statement, then sees that row.
func (s *Store) EnqueueDelivery(ctx context.Context, d store.Delivery) (store.Delivery, bool, error) {
	d, err := store.CheckDelivery(d)
	if err != nil {
		return store.Delivery{}, false, err
	}
	res, err := s.db.Write().ExecContext(ctx, insertDelivery, s.deliveryArgs(d)...)
	if err != nil {
		return store.Delivery{}, false, s.db.Translate("enqueue delivery", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return store.Delivery{}, false, s.db.Translate("enqueue delivery", err)
	}
	created := n == 1
	var row *sql.Row
	if created {
		row = s.db.Read().QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = $1`, d.ID)
	} else {
		row = s.db.Read().QueryRowContext(ctx,
			`SELECT `+deliveryColumns+` FROM webhook_deliveries
			 WHERE webhook_id = $1 AND alert_id = $2 AND alert_state = $3 AND tenant_id = $4`,
			d.WebhookID, d.AlertID, string(d.AlertState), d.TenantID)
	}
	out, err := scanDelivery(row)
	if err != nil {
		return store.Delivery{}, false, s.db.Translate("enqueue delivery", err)
	}
	return out, created, nil
}

// ClaimDeliveries implements store.Store: on Postgres FOR UPDATE SKIP
// LOCKED picks due rows no concurrent claim holds, and a row another claim
// leased and committed meanwhile is re-checked against the lease condition
// after the lock and left out; on SQLite the write transaction is the only
// claim running.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.ClaimedDelivery, error) {
	if err := store.CheckClaim(lease, limit); err != nil {
		return nil, err
	}
	token := store.NewID()
	var out []store.ClaimedDelivery
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE webhook_deliveries SET lease_token = $1, lease_expires_at = $2
			 WHERE id IN (
				SELECT id FROM webhook_deliveries
				WHERE status = 'pending' AND next_attempt_at <= $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $3)
				ORDER BY next_attempt_at, id LIMIT $4`+s.db.Lock(LockUpdateSkipLocked)+`)`,
			token, s.db.Time(now.Add(lease)), s.db.Time(now), limit)
		if err := MustAffect(res, err); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil // nothing due
			}
			return err
		}
		rows, err := tx.QueryContext(ctx, claimedSelect, token)
		out, err = Collect(s.db, rows, err, scanClaimed, "claim deliveries")
		return err
	})
	if err != nil {
		return nil, s.db.Translate("claim deliveries", err)
	}
	return out, nil
}

// ClaimDelivery implements store.Store: the delivery row is locked (FOR
// UPDATE) from the check to the lease.
func (s *Store) ClaimDelivery(ctx context.Context, tenantID, id string, now time.Time, lease time.Duration) (store.ClaimedDelivery, error) {
	if err := store.CheckClaim(lease, 1); err != nil {
		return store.ClaimedDelivery{}, err
	}
	tid, ok1 := store.CanonicalID(tenantID)
	did, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.ClaimedDelivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	now = now.Truncate(time.Millisecond)
	token := store.NewID()
	var out store.ClaimedDelivery
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		var until time.Time
		d, err := scanDeliveryWith(tx.QueryRowContext(ctx,
			`SELECT `+deliveryColumns+`, lease_expires_at FROM webhook_deliveries WHERE id = $1 AND tenant_id = $2`+s.db.Lock(LockUpdate),
			did, tid), ScanTime(&until))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %s: %w", did, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := store.DecideClaimDelivery(d, until, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET lease_token = $1, lease_expires_at = $2 WHERE id = $3`,
			token, s.db.Time(now.Add(lease)), did); err != nil {
			return err
		}
		out, err = scanClaimed(tx.QueryRowContext(ctx, claimedSelect, token))
		return err
	})
	if err != nil {
		return store.ClaimedDelivery{}, s.db.Translate("claim delivery", err)
	}
	return out, nil
}

// claimedSelect reads the deliveries of one claim with their webhook.
const claimedSelect = `SELECT d.id, d.tenant_id, d.webhook_id, d.alert_id, d.alert_state, d.payload, d.status, d.attempts,
	d.next_attempt_at, d.last_error, d.created_at, d.delivered_at, w.url, w.secret, d.lease_token, d.lease_expires_at
	FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
	WHERE d.lease_token = $1 ORDER BY d.next_attempt_at, d.id`

func scanClaimed(r Scanner) (store.ClaimedDelivery, error) {
	var c store.ClaimedDelivery
	d, err := scanDeliveryWith(r, &c.URL, &c.Secret, &c.LeaseToken, ScanTime(&c.LeaseExpiresAt))
	c.Delivery = d
	return c, err
}

// leased reads, in tx and FOR UPDATE, the delivery id held under token:
// ErrNotFound when there is no such delivery, ErrConflict when it is not
// pending under that token (it was claimed again, or marked).
func (s *Store) leased(ctx context.Context, tx *sql.Tx, id, token string) (store.Delivery, error) {
	did, ok := store.CanonicalID(id)
	if !ok {
		return store.Delivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	var cur sql.NullString
	d, err := scanDeliveryWith(tx.QueryRowContext(ctx,
		`SELECT `+deliveryColumns+`, lease_token FROM webhook_deliveries WHERE id = $1`+s.db.Lock(LockUpdate), did), &cur)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Delivery{}, fmt.Errorf("delivery %s: %w", did, store.ErrNotFound)
	}
	if err != nil {
		return store.Delivery{}, err
	}
	if d.Status != store.DeliveryPending || !cur.Valid || cur.String != token {
		return store.Delivery{}, fmt.Errorf("delivery %s is no longer leased under this token: %w", did, store.ErrConflict)
	}
	return d, nil
}

// MarkDelivered implements store.Store.
func (s *Store) MarkDelivered(ctx context.Context, id, leaseToken string, at time.Time) (store.Delivery, error) {
	var out store.Delivery
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		d, err := s.leased(ctx, tx, id, leaseToken)
		if err != nil {
			return err
		}
		out, err = scanDelivery(tx.QueryRowContext(ctx,
			`UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, delivered_at = $2,
				lease_token = NULL, lease_expires_at = NULL
			 WHERE id = $1 RETURNING `+deliveryColumns, d.ID, s.db.Time(orNow(at))))
		return err
	})
	if err != nil {
		return store.Delivery{}, s.db.Translate("mark delivered", err)
	}
	return out, nil
}

// MarkDeliveryFailed implements store.Store.
func (s *Store) MarkDeliveryFailed(ctx context.Context, id, leaseToken string, f store.DeliveryFailure, policy store.RetryPolicy) (store.Delivery, error) {
	f.At = orNow(f.At).Truncate(time.Millisecond)
	var out store.Delivery
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		d, err := s.leased(ctx, tx, id, leaseToken)
		if err != nil {
			return err
		}
		status, next, msg := store.DecideDeliveryFailure(d.Attempts+1, f, policy)
		out, err = scanDelivery(tx.QueryRowContext(ctx,
			`UPDATE webhook_deliveries SET status = $2, attempts = attempts + 1, next_attempt_at = $3, last_error = $4,
				lease_token = NULL, lease_expires_at = NULL
			 WHERE id = $1 RETURNING `+deliveryColumns, d.ID, string(status), s.db.Time(next), msg))
		return err
	})
	if err != nil {
		return store.Delivery{}, s.db.Translate("mark delivery failed", err)
	}
	return out, nil
}

// ListDeliveries implements store.Store.
func (s *Store) ListDeliveries(ctx context.Context, tenantID, webhookID string, limit int) ([]store.Delivery, error) {
	w, err := s.GetWebhook(ctx, tenantID, webhookID)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE webhook_id = $1 AND tenant_id = $2
		 ORDER BY created_at DESC, id DESC LIMIT $3`, w.ID, w.TenantID, store.PageSize(limit))
	return Collect(s.db, rows, err, scanDelivery, "list deliveries")
}

// PruneDeliveries implements store.Store.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.Write().ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < $1`, s.db.Time(before))
	if err != nil {
		return 0, s.db.Translate("prune deliveries", err)
	}
	n, err := res.RowsAffected()
	return n, s.db.Translate("prune deliveries", err)
}
