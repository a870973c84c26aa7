package postgres

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicemq/sluice/controlplane/store"
)

// ---- webhooks ----

// webhookColumns leave the secret out: it is read only by ClaimDeliveries.
const webhookColumns = `id, tenant_id, url, description, created_at`

func scanWebhook(r pgx.Row) (store.Webhook, error) {
	var w store.Webhook
	if err := r.Scan(&w.ID, &w.TenantID, &w.URL, &w.Description, &w.CreatedAt); err != nil {
		return store.Webhook{}, err
	}
	w.CreatedAt = w.CreatedAt.UTC()
	return w, nil
}

// CreateWebhook implements store.Store. The tenant row is locked (FOR NO KEY
// UPDATE, as CreateTopic does) from the count to the insert, so concurrent
// creations of one tenant never pass the limit.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook, secret []byte, maxPerTenant int) (store.Webhook, error) {
	w, err := store.CheckWebhook(w, secret)
	if err != nil {
		return store.Webhook{}, err
	}
	var out store.Webhook
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE`, w.TenantID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("tenant %s: %w", w.TenantID, store.ErrNotFound)
		}
		var n int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM webhooks WHERE tenant_id = $1`, w.TenantID).Scan(&n); err != nil {
			return err
		}
		if maxPerTenant > 0 && n >= int64(maxPerTenant) {
			return &store.LimitError{Limit: "webhooks", Current: n, Request: 1, Max: int64(maxPerTenant)}
		}
		out, err = scanWebhook(tx.QueryRow(ctx,
			`INSERT INTO webhooks (id, tenant_id, url, secret, description, created_at) VALUES ($1, $2, $3, $4, $5, $6)
			 RETURNING `+webhookColumns,
			w.ID, w.TenantID, w.URL, secret, w.Description, ts(orNow(w.CreatedAt))))
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
	w, err := scanWebhook(s.pool.QueryRow(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE id = $1 AND tenant_id = $2`, wid, tid))
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
	rows, err := s.pool.Query(ctx, `SELECT `+webhookColumns+` FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id`, tid)
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
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhooks WHERE id = $1 AND tenant_id = $2`, wid, tid)
	if err != nil {
		return translate("delete webhook", err)
	}
	if tag.RowsAffected() == 0 {
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
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL)
	ON CONFLICT (webhook_id, alert_id, alert_state) DO NOTHING`

// deliveryArgs are insertDelivery's arguments for d (checked).
func deliveryArgs(d store.Delivery) []any {
	created := ts(orNow(d.CreatedAt))
	next := created
	if !d.NextAttemptAt.IsZero() {
		next = ts(d.NextAttemptAt)
	}
	var alert pgtype.Text
	if d.AlertID != "" {
		alert = pgtype.Text{String: d.AlertID, Valid: true}
	}
	return []any{d.ID, d.TenantID, d.WebhookID, alert, string(d.AlertState), d.Payload, string(store.DeliveryPending), 0,
		next, "", created}
}

func scanDelivery(r pgx.Row) (store.Delivery, error) { return scanDeliveryWith(r) }

// scanDeliveryWith scans a delivery followed by the extra columns.
func scanDeliveryWith(r pgx.Row, extra ...any) (store.Delivery, error) {
	var (
		d             store.Delivery
		alert         pgtype.UUID
		state, status string
		delivered     pgtype.Timestamptz
	)
	dest := []any{&d.ID, &d.TenantID, &d.WebhookID, &alert, &state, &d.Payload, &status, &d.Attempts,
		&d.NextAttemptAt, &d.LastError, &d.CreatedAt, &delivered}
	if err := r.Scan(append(dest, extra...)...); err != nil {
		return store.Delivery{}, err
	}
	if alert.Valid {
		d.AlertID = alert.String()
	}
	d.AlertState, d.Status = store.AlertState(state), store.DeliveryStatus(status)
	d.NextAttemptAt, d.CreatedAt = d.NextAttemptAt.UTC(), d.CreatedAt.UTC()
	d.DeliveredAt = fromNullTS(delivered)
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
	tag, err := s.pool.Exec(ctx, insertDelivery, deliveryArgs(d)...)
	if err != nil {
		return store.Delivery{}, false, translate("enqueue delivery", err)
	}
	created := tag.RowsAffected() == 1
	var row pgx.Row
	if created {
		row = s.pool.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = $1`, d.ID)
	} else {
		row = s.pool.QueryRow(ctx,
			`SELECT `+deliveryColumns+` FROM webhook_deliveries
			 WHERE webhook_id = $1 AND alert_id = $2 AND alert_state = $3 AND tenant_id = $4`,
			d.WebhookID, d.AlertID, string(d.AlertState), d.TenantID)
	}
	out, err := scanDelivery(row)
	if err != nil {
		return store.Delivery{}, false, translate("enqueue delivery", err)
	}
	return out, created, nil
}

// ClaimDeliveries implements store.Store: FOR UPDATE SKIP LOCKED picks due
// rows no concurrent claim holds; a row another claim leased and committed
// meanwhile is re-checked against the lease condition after the lock and
// left out.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.ClaimedDelivery, error) {
	if err := store.CheckClaim(lease, limit); err != nil {
		return nil, err
	}
	now = ts(now)
	until := ts(now.Add(lease))
	token := store.NewID()
	var out []store.ClaimedDelivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx,
			`UPDATE webhook_deliveries SET lease_token = $1, lease_expires_at = $2
			 WHERE id IN (
				SELECT id FROM webhook_deliveries
				WHERE status = 'pending' AND next_attempt_at <= $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $3)
				ORDER BY next_attempt_at, id LIMIT $4
				FOR UPDATE SKIP LOCKED)`,
			token, until, now, limit)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		rows, err := tx.Query(ctx, claimedSelect, token)
		if err != nil {
			return err
		}
		out, err = collect(rows, scanClaimed, "claim deliveries")
		return err
	})
	if err != nil {
		return nil, translate("claim deliveries", err)
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
	now = ts(now)
	token := store.NewID()
	var out store.ClaimedDelivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var until pgtype.Timestamptz
		d, err := scanDeliveryWith(tx.QueryRow(ctx,
			`SELECT `+deliveryColumns+`, lease_expires_at FROM webhook_deliveries WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, did, tid), &until)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("delivery %s: %w", did, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if err := store.DecideClaimDelivery(d, fromNullTS(until), now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET lease_token = $1, lease_expires_at = $2 WHERE id = $3`,
			token, ts(now.Add(lease)), did); err != nil {
			return err
		}
		out, err = scanClaimed(tx.QueryRow(ctx, claimedSelect, token))
		return err
	})
	if err != nil {
		return store.ClaimedDelivery{}, translate("claim delivery", err)
	}
	return out, nil
}

// claimedSelect reads the deliveries of one claim with their webhook.
const claimedSelect = `SELECT d.id, d.tenant_id, d.webhook_id, d.alert_id, d.alert_state, d.payload, d.status, d.attempts,
	d.next_attempt_at, d.last_error, d.created_at, d.delivered_at, w.url, w.secret, d.lease_token, d.lease_expires_at
	FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
	WHERE d.lease_token = $1 ORDER BY d.next_attempt_at, d.id`

func scanClaimed(r pgx.Row) (store.ClaimedDelivery, error) {
	var (
		c             store.ClaimedDelivery
		alert         pgtype.UUID
		state, status string
		delivered     pgtype.Timestamptz
	)
	if err := r.Scan(&c.ID, &c.TenantID, &c.WebhookID, &alert, &state, &c.Payload, &status, &c.Attempts,
		&c.NextAttemptAt, &c.LastError, &c.CreatedAt, &delivered, &c.URL, &c.Secret, &c.LeaseToken, &c.LeaseExpiresAt); err != nil {
		return store.ClaimedDelivery{}, err
	}
	if alert.Valid {
		c.AlertID = alert.String()
	}
	c.AlertState, c.Status = store.AlertState(state), store.DeliveryStatus(status)
	c.NextAttemptAt, c.CreatedAt, c.LeaseExpiresAt = c.NextAttemptAt.UTC(), c.CreatedAt.UTC(), c.LeaseExpiresAt.UTC()
	c.DeliveredAt = fromNullTS(delivered)
	return c, nil
}

// leased reads, in tx and FOR UPDATE, the delivery id held under token:
// ErrNotFound when there is no such delivery, ErrConflict when it is not
// pending under that token (it was claimed again, or marked).
func leased(ctx context.Context, tx pgx.Tx, id, token string) (store.Delivery, error) {
	did, ok := store.CanonicalID(id)
	if !ok {
		return store.Delivery{}, fmt.Errorf("delivery %q: %w", id, store.ErrNotFound)
	}
	var cur pgtype.UUID
	d, err := scanDeliveryWith(tx.QueryRow(ctx,
		`SELECT `+deliveryColumns+`, lease_token FROM webhook_deliveries WHERE id = $1 FOR UPDATE`, did), &cur)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Delivery{}, fmt.Errorf("delivery %s: %w", did, store.ErrNotFound)
	}
	if err != nil {
		return store.Delivery{}, err
	}
	if d.Status != store.DeliveryPending || !cur.Valid || cur.String() != token {
		return store.Delivery{}, fmt.Errorf("delivery %s is no longer leased under this token: %w", did, store.ErrConflict)
	}
	return d, nil
}

// MarkDelivered implements store.Store.
func (s *Store) MarkDelivered(ctx context.Context, id, leaseToken string, at time.Time) (store.Delivery, error) {
	var out store.Delivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		d, err := leased(ctx, tx, id, leaseToken)
		if err != nil {
			return err
		}
		out, err = scanDelivery(tx.QueryRow(ctx,
			`UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, delivered_at = $2,
				lease_token = NULL, lease_expires_at = NULL
			 WHERE id = $1 RETURNING `+deliveryColumns, d.ID, ts(orNow(at))))
		return err
	})
	if err != nil {
		return store.Delivery{}, translate("mark delivered", err)
	}
	return out, nil
}

// MarkDeliveryFailed implements store.Store.
func (s *Store) MarkDeliveryFailed(ctx context.Context, id, leaseToken string, f store.DeliveryFailure, policy store.RetryPolicy) (store.Delivery, error) {
	f.At = ts(orNow(f.At))
	var out store.Delivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		d, err := leased(ctx, tx, id, leaseToken)
		if err != nil {
			return err
		}
		status, next, msg := store.DecideDeliveryFailure(d.Attempts+1, f, policy)
		out, err = scanDelivery(tx.QueryRow(ctx,
			`UPDATE webhook_deliveries SET status = $2, attempts = attempts + 1, next_attempt_at = $3, last_error = $4,
				lease_token = NULL, lease_expires_at = NULL
			 WHERE id = $1 RETURNING `+deliveryColumns, d.ID, string(status), ts(next), msg))
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
	rows, err := s.pool.Query(ctx,
		`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE webhook_id = $1 AND tenant_id = $2
		 ORDER BY created_at DESC, id DESC LIMIT $3`, w.ID, w.TenantID, store.PageSize(limit))
	if err != nil {
		return nil, translate("list deliveries", err)
	}
	return collect(rows, scanDelivery, "list deliveries")
}

// PruneDeliveries implements store.Store.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < $1`, ts(before))
	if err != nil {
		return 0, translate("prune deliveries", err)
	}
	return tag.RowsAffected(), nil
}
