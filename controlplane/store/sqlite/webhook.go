package sqlite

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

func scanWebhook(r rowScanner) (store.Webhook, error) {
	var (
		w       store.Webhook
		created int64
	)
	if err := r.Scan(&w.ID, &w.TenantID, &w.URL, &w.Description, &created); err != nil {
		return store.Webhook{}, err
	}
	w.CreatedAt = fromMS(created)
	return w, nil
}

// CreateWebhook implements store.Store; the count and the insert run under
// the single write lock.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook, secret []byte, maxPerTenant int) (store.Webhook, error) {
	w, err := store.CheckWebhook(w, secret)
	if err != nil {
		return store.Webhook{}, err
	}
	var out store.Webhook
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var tenants, n int64
		if err := tx.QueryRowContext(ctx,
			`SELECT (SELECT count(*) FROM tenants WHERE id = ?1), (SELECT count(*) FROM webhooks WHERE tenant_id = ?1)`,
			w.TenantID).Scan(&tenants, &n); err != nil {
			return err
		}
		if tenants == 0 {
			return fmt.Errorf("tenant %s: %w", w.TenantID, store.ErrNotFound)
		}
		if maxPerTenant > 0 && n >= int64(maxPerTenant) {
			return &store.LimitError{Limit: "webhooks", Current: n, Request: 1, Max: int64(maxPerTenant)}
		}
		var err error
		out, err = scanWebhook(tx.QueryRowContext(ctx,
			`INSERT INTO webhooks (id, tenant_id, url, secret, description, created_at) VALUES (?, ?, ?, ?, ?, ?)
			 RETURNING `+webhookColumns,
			w.ID, w.TenantID, w.URL, secret, w.Description, toMS(orNow(w.CreatedAt))))
		return err
	})
	if err != nil {
		return store.Webhook{}, translate("create webhook", err)
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
	w, err := scanWebhook(s.read.QueryRowContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = ? AND tenant_id = ?`, wid, tid))
	if err != nil {
		return store.Webhook{}, translate("get webhook", err)
	}
	return w, nil
}

// ListWebhooks implements store.Store.
func (s *Store) ListWebhooks(ctx context.Context, tenantID string) ([]store.Webhook, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = ? ORDER BY created_at, id`, tid)
	if err != nil {
		return nil, translate("list webhooks", err)
	}
	return collect(rows, scanWebhook, "list webhooks")
}

// DeleteWebhook implements store.Store; its deliveries go by ON DELETE CASCADE.
func (s *Store) DeleteWebhook(ctx context.Context, tenantID, id string) error {
	tid, ok1 := store.CanonicalID(tenantID)
	wid, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.ErrNotFound
	}
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ? AND tenant_id = ?`, wid, tid)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return translate("delete webhook", err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// ---- deliveries ----

const deliveryColumns = `id, tenant_id, webhook_id, alert_id, alert_state, payload, status, attempts,
	next_attempt_at, last_error, created_at, delivered_at`

// insertDelivery inserts a pending delivery unless its (webhook, alert,
// state) is enqueued already.
const insertDelivery = `INSERT INTO webhook_deliveries (` + deliveryColumns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)
	ON CONFLICT (webhook_id, alert_id, alert_state) DO NOTHING`

// deliveryArgs are insertDelivery's arguments for d (checked).
func deliveryArgs(d store.Delivery) []any {
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
		toMS(next), "", toMS(created)}
}

func scanDelivery(r rowScanner) (store.Delivery, error) { return scanDeliveryWith(r) }

// scanDeliveryWith scans a delivery followed by the extra columns.
func scanDeliveryWith(r rowScanner, extra ...any) (store.Delivery, error) {
	var (
		d             store.Delivery
		alert         sql.NullString
		state, status string
		next, created int64
		delivered     sql.NullInt64
	)
	dest := []any{&d.ID, &d.TenantID, &d.WebhookID, &alert, &state, &d.Payload, &status, &d.Attempts,
		&next, &d.LastError, &created, &delivered}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return store.Delivery{}, err
	}
	d.AlertID = alert.String
	d.AlertState, d.Status = store.AlertState(state), store.DeliveryStatus(status)
	d.NextAttemptAt, d.CreatedAt = fromMS(next), fromMS(created)
	d.DeliveredAt = fromNullMS(delivered)
	return d, nil
}

// EnqueueDelivery implements store.Store, under the single write lock.
func (s *Store) EnqueueDelivery(ctx context.Context, d store.Delivery) (store.Delivery, bool, error) {
	d, err := store.CheckDelivery(d)
	if err != nil {
		return store.Delivery{}, false, err
	}
	var (
		out     store.Delivery
		created bool
	)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, insertDelivery, deliveryArgs(d)...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		var row *sql.Row
		if created {
			row = tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = ?`, d.ID)
		} else {
			row = tx.QueryRowContext(ctx,
				`SELECT `+deliveryColumns+` FROM webhook_deliveries
				 WHERE webhook_id = ? AND alert_id = ? AND alert_state = ? AND tenant_id = ?`,
				d.WebhookID, d.AlertID, string(d.AlertState), d.TenantID)
		}
		out, err = scanDelivery(row)
		return err
	})
	if err != nil {
		return store.Delivery{}, false, translate("enqueue delivery", err)
	}
	return out, created, nil
}

// ClaimDeliveries implements store.Store: the pick and the lease are one
// write transaction, so concurrent claims take turns.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.ClaimedDelivery, error) {
	if err := store.CheckClaim(lease, limit); err != nil {
		return nil, err
	}
	token := store.NewID()
	var out []store.ClaimedDelivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE webhook_deliveries SET lease_token = ?1, lease_expires_at = ?2
			 WHERE id IN (
				SELECT id FROM webhook_deliveries
				WHERE status = 'pending' AND next_attempt_at <= ?3 AND (lease_expires_at IS NULL OR lease_expires_at <= ?3)
				ORDER BY next_attempt_at, id LIMIT ?4)`,
			token, toMS(now.Add(lease)), toMS(now), limit)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		out, err = claimedBy(ctx, tx, token)
		return err
	})
	if err != nil {
		return nil, translate("claim deliveries", err)
	}
	return out, nil
}

// claimedBy reads, in tx, the deliveries leased under token with their
// webhook's URL and secret.
func claimedBy(ctx context.Context, tx *sql.Tx, token string) ([]store.ClaimedDelivery, error) {
	rows, err := tx.QueryContext(ctx,
		`SELECT d.id, d.tenant_id, d.webhook_id, d.alert_id, d.alert_state, d.payload, d.status, d.attempts,
			d.next_attempt_at, d.last_error, d.created_at, d.delivered_at, w.url, w.secret, d.lease_token, d.lease_expires_at
		 FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		 WHERE d.lease_token = ? ORDER BY d.next_attempt_at, d.id`, token)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r rowScanner) (store.ClaimedDelivery, error) {
		var (
			c     store.ClaimedDelivery
			until int64
		)
		d, err := scanDeliveryWith(r, &c.URL, &c.Secret, &c.LeaseToken, &until)
		c.Delivery, c.LeaseExpiresAt = d, fromMS(until)
		return c, err
	}, "claim deliveries")
}

// ClaimDelivery implements store.Store, under the single write lock.
func (s *Store) ClaimDelivery(ctx context.Context, tenantID, id string, now time.Time, lease time.Duration) (store.ClaimedDelivery, error) {
	if err := store.CheckClaim(lease, 1); err != nil {
		return store.ClaimedDelivery{}, err
	}
	tid, ok1 := store.CanonicalID(tenantID)
	did, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.ClaimedDelivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	token := store.NewID()
	var out store.ClaimedDelivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var until sql.NullInt64
		d, err := scanDeliveryWith(tx.QueryRowContext(ctx,
			`SELECT `+deliveryColumns+`, lease_expires_at FROM webhook_deliveries WHERE id = ? AND tenant_id = ?`, did, tid), &until)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %s: %w", did, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := store.DecideClaimDelivery(d, fromNullMS(until), now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhook_deliveries SET lease_token = ?, lease_expires_at = ? WHERE id = ?`,
			token, toMS(now.Add(lease)), did); err != nil {
			return err
		}
		got, err := claimedBy(ctx, tx, token)
		if err != nil {
			return err
		}
		if len(got) != 1 {
			return fmt.Errorf("claim delivery %s: %d rows under its lease", did, len(got))
		}
		out = got[0]
		return nil
	})
	if err != nil {
		return store.ClaimedDelivery{}, translate("claim delivery", err)
	}
	return out, nil
}

// leased reads, in tx, the delivery id held under token: ErrNotFound when
// there is no such delivery, ErrConflict when it is not pending under that
// token (it was claimed again, or marked).
func leased(ctx context.Context, tx *sql.Tx, id, token string) (store.Delivery, error) {
	did, ok := store.CanonicalID(id)
	if !ok {
		return store.Delivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	var cur sql.NullString
	d, err := scanDeliveryWith(tx.QueryRowContext(ctx,
		`SELECT `+deliveryColumns+`, lease_token FROM webhook_deliveries WHERE id = ?`, did), &cur)
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
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		d, err := leased(ctx, tx, id, leaseToken)
		if err != nil {
			return err
		}
		out, err = scanDelivery(tx.QueryRowContext(ctx,
			`UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, delivered_at = ?2,
				lease_token = NULL, lease_expires_at = NULL
			 WHERE id = ?1 RETURNING `+deliveryColumns, d.ID, toMS(orNow(at))))
		return err
	})
	if err != nil {
		return store.Delivery{}, translate("mark delivered", err)
	}
	return out, nil
}

// MarkDeliveryFailed implements store.Store.
func (s *Store) MarkDeliveryFailed(ctx context.Context, id, leaseToken string, f store.DeliveryFailure, policy store.RetryPolicy) (store.Delivery, error) {
	f.At = orNow(f.At).Truncate(time.Millisecond)
	var out store.Delivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		d, err := leased(ctx, tx, id, leaseToken)
		if err != nil {
			return err
		}
		status, next, msg := store.DecideDeliveryFailure(d.Attempts+1, f, policy)
		out, err = scanDelivery(tx.QueryRowContext(ctx,
			`UPDATE webhook_deliveries SET status = ?2, attempts = attempts + 1, next_attempt_at = ?3, last_error = ?4,
				lease_token = NULL, lease_expires_at = NULL
			 WHERE id = ?1 RETURNING `+deliveryColumns, d.ID, string(status), toMS(next), msg))
		return err
	})
	if err != nil {
		return store.Delivery{}, translate("mark delivery failed", err)
	}
	return out, nil
}

// ListDeliveries implements store.Store.
func (s *Store) ListDeliveries(ctx context.Context, tenantID, webhookID string, limit int) ([]store.Delivery, error) {
	w, err := s.GetWebhook(ctx, tenantID, webhookID)
	if err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE webhook_id = ? AND tenant_id = ?
		 ORDER BY created_at DESC, id DESC LIMIT ?`, w.ID, w.TenantID, store.PageSize(limit))
	if err != nil {
		return nil, translate("list deliveries", err)
	}
	return collect(rows, scanDelivery, "list deliveries")
}

// PruneDeliveries implements store.Store.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < ?`, toMS(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, translate("prune deliveries", err)
	}
	return n, nil
}
