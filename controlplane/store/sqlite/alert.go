package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
)

// ---- lag samples ----

const lagSampleColumns = `tenant_id, group_name, topic_id, partition, sampled_at, topic_name, offline,
	committed_offset, log_start_offset, log_end_offset, lag_messages, lag_age_ms, partition_bytes,
	unconsumed_bytes, retention_ms, retention_bytes`

func scanLagSample(r rowScanner) (store.LagSample, error) {
	var (
		s       store.LagSample
		sampled int64
	)
	if err := r.Scan(&s.TenantID, &s.Group, &s.TopicID, &s.Partition, &sampled, &s.TopicName, &s.Offline,
		&s.CommittedOffset, &s.LogStartOffset, &s.LogEndOffset, &s.LagMessages, &s.LagAgeMs, &s.PartitionBytes,
		&s.UnconsumedBytes, &s.RetentionMs, &s.RetentionBytes); err != nil {
		return store.LagSample{}, err
	}
	s.SampledAt = fromMS(sampled)
	return s, nil
}

// AddLagSamples implements store.Store: one write transaction, one prepared
// insert per sample.
func (s *Store) AddLagSamples(ctx context.Context, samples []store.LagSample) error {
	if len(samples) == 0 {
		return nil
	}
	checked := make([]store.LagSample, len(samples))
	for i, smp := range samples {
		var err error
		if checked[i], err = store.CheckLagSample(smp); err != nil {
			return err
		}
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO lag_samples (`+lagSampleColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (tenant_id, group_name, topic_id, partition, sampled_at) DO NOTHING`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, smp := range checked {
			if _, err := stmt.ExecContext(ctx, smp.TenantID, smp.Group, smp.TopicID, smp.Partition, toMS(smp.SampledAt),
				smp.TopicName, smp.Offline, smp.CommittedOffset, smp.LogStartOffset, smp.LogEndOffset, smp.LagMessages,
				smp.LagAgeMs, smp.PartitionBytes, smp.UnconsumedBytes, smp.RetentionMs, smp.RetentionBytes); err != nil {
				return err
			}
		}
		return nil
	})
	return translate("add lag samples", err)
}

// ListLagSamples implements store.Store.
func (s *Store) ListLagSamples(ctx context.Context, key store.LagKey, since, until time.Time) ([]store.LagSample, error) {
	tid, ok1 := store.CanonicalID(key.TenantID)
	pid, ok2 := store.CanonicalID(key.TopicID)
	if !ok1 || !ok2 {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+lagSampleColumns+` FROM lag_samples
		 WHERE tenant_id = ?1 AND group_name = ?2 AND topic_id = ?3 AND partition = ?4
		   AND sampled_at >= ?5 AND (?6 IS NULL OR sampled_at <= ?6)
		 ORDER BY sampled_at`,
		tid, key.Group, pid, key.Partition, toMS(since), nullMS(until))
	if err != nil {
		return nil, translate("list lag samples", err)
	}
	return collect(rows, scanLagSample, "list lag samples")
}

// ListLagHistories implements store.Store: one query joining the keys, a
// JSON array of [position, tenant, group, topic, partition], to the samples
// through their clustered key; only the columns the forecast takes travel
// back.
func (s *Store) ListLagHistories(ctx context.Context, keys []store.LagKey, since, until time.Time) ([][]forecast.Sample, error) {
	keys, ok, err := store.CheckLagHistoryKeys(keys)
	if err != nil {
		return nil, err
	}
	out := make([][]forecast.Sample, len(keys))
	var arg [][5]any
	for i, k := range keys {
		if ok[i] {
			arg = append(arg, [5]any{i, k.TenantID, k.Group, k.TopicID, k.Partition})
		}
	}
	if len(arg) == 0 {
		return out, nil
	}
	js, err := json.Marshal(arg)
	if err != nil {
		return nil, fmt.Errorf("list lag histories: %w", err)
	}
	rows, err := s.read.QueryContext(ctx,
		`WITH k(pos, tenant_id, group_name, topic_id, partition) AS (
		 	SELECT value->>0, value->>1, value->>2, value->>3, value->>4 FROM json_each(?1))
		 SELECT k.pos, l.sampled_at, l.offline, l.committed_offset, l.log_start_offset, l.log_end_offset, l.lag_age_ms,
		 	l.partition_bytes, l.unconsumed_bytes, l.retention_ms, l.retention_bytes
		 FROM k JOIN lag_samples l ON l.tenant_id = k.tenant_id AND l.group_name = k.group_name AND l.topic_id = k.topic_id AND l.partition = k.partition
		 WHERE l.sampled_at >= ?2 AND (?3 IS NULL OR l.sampled_at <= ?3)
		 ORDER BY k.pos, l.sampled_at`,
		string(js), toMS(since), nullMS(until))
	if err != nil {
		return nil, translate("list lag histories", err)
	}
	defer rows.Close()
	var (
		i       int
		sampled int64
		smp     store.LagSample
	)
	for rows.Next() {
		if err := rows.Scan(&i, &sampled, &smp.Offline, &smp.CommittedOffset, &smp.LogStartOffset, &smp.LogEndOffset, &smp.LagAgeMs,
			&smp.PartitionBytes, &smp.UnconsumedBytes, &smp.RetentionMs, &smp.RetentionBytes); err != nil {
			return nil, translate("list lag histories", err)
		}
		smp.SampledAt = fromMS(sampled)
		out[i] = append(out[i], smp.Forecast())
	}
	if err := rows.Err(); err != nil {
		return nil, translate("list lag histories", err)
	}
	return out, nil
}

// latestLagSamples is the newest sample of each key, of one tenant or (tenant
// NULL) of all. SQLite's bare columns of a max() aggregate come from the row
// holding the maximum, here the newest sample of each group (key).
const latestLagSamples = `SELECT ` + lagSampleColumns + ` FROM (
	SELECT ` + lagSampleColumns + `, max(sampled_at) FROM lag_samples
	WHERE (?1 IS NULL OR tenant_id = ?1)
	GROUP BY tenant_id, group_name, topic_id, partition)
	ORDER BY tenant_id, group_name, topic_id, partition`

// LatestLagSamples implements store.Store.
func (s *Store) LatestLagSamples(ctx context.Context, tenantID string) ([]store.LagSample, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx, latestLagSamples, tid)
	if err != nil {
		return nil, translate("list latest lag samples", err)
	}
	return collect(rows, scanLagSample, "list latest lag samples")
}

// AllLatestLagSamples implements store.Store.
func (s *Store) AllLatestLagSamples(ctx context.Context) ([]store.LagSample, error) {
	rows, err := s.read.QueryContext(ctx, latestLagSamples, nil)
	if err != nil {
		return nil, translate("list latest lag samples", err)
	}
	return collect(rows, scanLagSample, "list latest lag samples")
}

// PruneLagSamples implements store.Store.
func (s *Store) PruneLagSamples(ctx context.Context, before time.Time, maxPerKey int) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM lag_samples WHERE sampled_at < ?`, toMS(before))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || maxPerKey <= 0 {
			return err
		}
		res, err = tx.ExecContext(ctx,
			`DELETE FROM lag_samples WHERE (tenant_id, group_name, topic_id, partition, sampled_at) IN (
				SELECT tenant_id, group_name, topic_id, partition, sampled_at FROM (
					SELECT tenant_id, group_name, topic_id, partition, sampled_at,
						row_number() OVER (PARTITION BY tenant_id, group_name, topic_id, partition ORDER BY sampled_at DESC) AS rn
					FROM lag_samples)
				WHERE rn > ?)`, maxPerKey)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		n += m
		return err
	})
	if err != nil {
		return 0, translate("prune lag samples", err)
	}
	return n, nil
}

// ---- alerts ----

const alertColumns = `id, tenant_id, kind, group_name, topic_id, topic_name, partition, state, details,
	created_at, updated_at, fired_at, resolved_at, clear_since`

func scanAlert(r rowScanner) (store.Alert, error) {
	var (
		a                store.Alert
		kind, state      string
		details          string
		created, updated int64
		fired, resolved  sql.NullInt64
		clear            sql.NullInt64
	)
	if err := r.Scan(&a.ID, &a.TenantID, &kind, &a.Group, &a.TopicID, &a.TopicName, &a.Partition, &state, &details,
		&created, &updated, &fired, &resolved, &clear); err != nil {
		return store.Alert{}, err
	}
	a.Details = []byte(details)
	a.ClearSince = fromNullMS(clear)
	a.Kind, a.State = store.AlertKind(kind), store.AlertState(state)
	a.CreatedAt, a.UpdatedAt = fromMS(created), fromMS(updated)
	a.FiredAt, a.ResolvedAt = fromNullMS(fired), fromNullMS(resolved)
	return a, nil
}

// TransitionAlert implements store.Store, under the single write lock: the
// read of the current state and the write are one step for every writer.
func (s *Store) TransitionAlert(ctx context.Context, tr store.AlertTransition) (store.Alert, error) {
	tr, err := store.CheckAlertTransition(tr)
	if err != nil {
		return store.Alert{}, err
	}
	now := orNow(tr.At).Truncate(time.Millisecond)
	var out store.Alert
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if tr.From == store.AlertNone {
			a := store.ApplyAlertTransition(store.Alert{}, tr, now)
			out, err = scanAlert(tx.QueryRowContext(ctx,
				`INSERT INTO alerts (`+alertColumns+`) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, NULL, ?12)
				 ON CONFLICT (tenant_id, kind, group_name, topic_id, partition) WHERE state <> 'resolved' DO NOTHING
				 RETURNING `+alertColumns,
				a.ID, a.TenantID, string(a.Kind), a.Group, a.TopicID, a.TopicName, a.Partition, string(a.State),
				string(a.Details), toMS(a.CreatedAt), nullMS(a.FiredAt), nullMS(a.ClearSince)))
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("the %s alert of group %q on %s/%d is active already: %w",
					tr.Key.Kind, tr.Key.Group, tr.Key.TopicID, tr.Key.Partition, store.ErrConflict)
			}
			if err != nil {
				return err
			}
		} else {
			cur, err := scanAlert(tx.QueryRowContext(ctx,
				`SELECT `+alertColumns+` FROM alerts WHERE id = ? AND tenant_id = ?`, tr.ID, tr.Key.TenantID))
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("alert %s: %w", tr.ID, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			a, err := store.DecideAlertTransition(cur, tr, now)
			if err != nil {
				return err
			}
			out, err = scanAlert(tx.QueryRowContext(ctx,
				`UPDATE alerts SET state = ?2, details = ?3, updated_at = ?4, fired_at = ?5, resolved_at = ?6, clear_since = ?7
				 WHERE id = ?1 RETURNING `+alertColumns,
				a.ID, string(a.State), string(a.Details), toMS(a.UpdatedAt), nullMS(a.FiredAt), nullMS(a.ResolvedAt), nullMS(a.ClearSince)))
			if err != nil {
				return err
			}
		}
		if tr.From == tr.To || tr.Payload == nil {
			return nil
		}
		return enqueueForAlert(ctx, tx, out, tr.Payload)
	})
	if err != nil {
		return store.Alert{}, translate("transition alert", err)
	}
	return out, nil
}

// RefreshAlerts implements store.Store: one write transaction, one
// prepared compare-and-set UPDATE per refresh.
func (s *Store) RefreshAlerts(ctx context.Context, refreshes []store.AlertTransition) ([]bool, error) {
	refreshes, err := store.CheckAlertRefreshes(refreshes)
	if err != nil {
		return nil, err
	}
	applied := make([]bool, len(refreshes))
	if len(refreshes) == 0 {
		return applied, nil
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		clear(applied) // a retried transaction starts over
		stmt, err := tx.PrepareContext(ctx, `UPDATE alerts SET details = ?1, updated_at = ?2, clear_since = ?3
			WHERE id = ?4 AND tenant_id = ?5 AND kind = ?6 AND group_name = ?7 AND topic_id = ?8 AND partition = ?9 AND state = ?10`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, tr := range refreshes {
			res, err := stmt.ExecContext(ctx, string(tr.Details), toMS(tr.At), nullMS(tr.ClearSince),
				tr.ID, tr.Key.TenantID, string(tr.Key.Kind), tr.Key.Group, tr.Key.TopicID, tr.Key.Partition, string(tr.From))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			applied[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, translate("refresh alerts", err)
	}
	return applied, nil
}

// enqueueForAlert enqueues, in tx, a delivery of a's new state to every
// webhook of its tenant.
func enqueueForAlert(ctx context.Context, tx *sql.Tx, a store.Alert, payload func(store.Alert) ([]byte, error)) error {
	rows, err := tx.QueryContext(ctx, `SELECT id FROM webhooks WHERE tenant_id = ? ORDER BY created_at, id`, a.TenantID)
	if err != nil {
		return err
	}
	hooks, err := collect(rows, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, "list webhooks")
	if err != nil || len(hooks) == 0 {
		return err
	}
	body, err := payload(a)
	if err != nil {
		return err
	}
	for _, h := range hooks {
		d, err := store.CheckDelivery(store.Delivery{TenantID: a.TenantID, WebhookID: h, AlertID: a.ID, AlertState: a.State, Payload: body, CreatedAt: a.UpdatedAt})
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertDelivery, deliveryArgs(d)...); err != nil {
			return err
		}
	}
	return nil
}

// GetAlert implements store.Store.
func (s *Store) GetAlert(ctx context.Context, tenantID, id string) (store.Alert, error) {
	tid, ok1 := store.CanonicalID(tenantID)
	aid, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.Alert{}, store.ErrNotFound
	}
	a, err := scanAlert(s.read.QueryRowContext(ctx, `SELECT `+alertColumns+` FROM alerts WHERE id = ? AND tenant_id = ?`, aid, tid))
	if err != nil {
		return store.Alert{}, translate("get alert", err)
	}
	return a, nil
}

// ListAlerts implements store.Store.
func (s *Store) ListAlerts(ctx context.Context, tenantID string, q store.AlertQuery) ([]store.Alert, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	var after sql.NullString
	if q.AfterID != "" {
		aid, ok := store.CanonicalID(q.AfterID)
		if !ok {
			return nil, fmt.Errorf("alert %q: %w", q.AfterID, store.ErrNotFound)
		}
		var found bool
		if err := s.read.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM alerts WHERE id = ? AND tenant_id = ?)`, aid, tid).Scan(&found); err != nil {
			return nil, translate("list alerts", err)
		}
		if !found {
			return nil, fmt.Errorf("alert %s: %w", aid, store.ErrNotFound)
		}
		after = sql.NullString{String: aid, Valid: true}
	}
	states := make([]string, len(q.States))
	for i, st := range q.States {
		states[i] = string(st)
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+alertColumns+` FROM alerts
		 WHERE tenant_id = ?1 AND (?2 = '[]' OR state IN (SELECT value FROM json_each(?2)))
		   AND (?3 IS NULL OR (created_at, id) < (SELECT created_at, id FROM alerts WHERE id = ?3))
		   AND (?5 = '' OR group_name = ?5)
		 ORDER BY created_at DESC, id DESC LIMIT ?4`,
		tid, encodeList(states), after, store.PageSize(q.Limit), q.Group)
	if err != nil {
		return nil, translate("list alerts", err)
	}
	return collect(rows, scanAlert, "list alerts")
}

// ListActiveAlerts implements store.Store.
func (s *Store) ListActiveAlerts(ctx context.Context) ([]store.Alert, error) {
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+alertColumns+` FROM alerts WHERE state <> 'resolved'
		 ORDER BY tenant_id, group_name, topic_id, partition, kind`)
	if err != nil {
		return nil, translate("list active alerts", err)
	}
	return collect(rows, scanAlert, "list active alerts")
}

// ---- alert policies ----

func scanAlertPolicy(r rowScanner) (store.AlertPolicy, error) {
	var (
		p                  store.AlertPolicy
		threshold, updated int64
	)
	if err := r.Scan(&p.TenantID, &threshold, &updated); err != nil {
		return store.AlertPolicy{}, err
	}
	p.ExpiryRiskThreshold, p.UpdatedAt = time.Duration(threshold)*time.Millisecond, fromMS(updated)
	return p, nil
}

// GetAlertPolicy implements store.Store.
func (s *Store) GetAlertPolicy(ctx context.Context, tenantID string) (store.AlertPolicy, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.AlertPolicy{}, store.ErrNotFound
	}
	p, err := scanAlertPolicy(s.read.QueryRowContext(ctx,
		`SELECT tenant_id, expiry_risk_threshold_ms, updated_at FROM alert_policies WHERE tenant_id = ?`, tid))
	if err != nil {
		return store.AlertPolicy{}, translate("get alert policy", err)
	}
	return p, nil
}

// PutAlertPolicy implements store.Store.
func (s *Store) PutAlertPolicy(ctx context.Context, p store.AlertPolicy) (store.AlertPolicy, error) {
	p, err := store.CheckAlertPolicy(p)
	if err != nil {
		return store.AlertPolicy{}, err
	}
	var out store.AlertPolicy
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanAlertPolicy(tx.QueryRowContext(ctx,
			`INSERT INTO alert_policies (tenant_id, expiry_risk_threshold_ms, updated_at) VALUES (?, ?, ?)
			 ON CONFLICT (tenant_id) DO UPDATE SET expiry_risk_threshold_ms = excluded.expiry_risk_threshold_ms, updated_at = excluded.updated_at
			 RETURNING tenant_id, expiry_risk_threshold_ms, updated_at`,
			p.TenantID, p.ExpiryRiskThreshold.Milliseconds(), toMS(orNow(p.UpdatedAt))))
		return err
	})
	if err != nil {
		return store.AlertPolicy{}, translate("put alert policy", err)
	}
	return out, nil
}

// ListAlertPolicies implements store.Store.
func (s *Store) ListAlertPolicies(ctx context.Context) ([]store.AlertPolicy, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT tenant_id, expiry_risk_threshold_ms, updated_at FROM alert_policies ORDER BY tenant_id`)
	if err != nil {
		return nil, translate("list alert policies", err)
	}
	return collect(rows, scanAlertPolicy, "list alert policies")
}
