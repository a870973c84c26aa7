package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
)

// ---- lag samples ----

const lagSampleColumns = `tenant_id, group_name, topic_id, partition, sampled_at, topic_name, offline,
	committed_offset, log_start_offset, log_end_offset, lag_messages, lag_age_ms, partition_bytes,
	unconsumed_bytes, retention_ms, retention_bytes`

func scanLagSample(r Scanner) (store.LagSample, error) {
	var s store.LagSample
	if err := r.Scan(&s.TenantID, &s.Group, &s.TopicID, &s.Partition, ScanTime(&s.SampledAt), &s.TopicName, &s.Offline,
		&s.CommittedOffset, &s.LogStartOffset, &s.LogEndOffset, &s.LagMessages, &s.LagAgeMs, &s.PartitionBytes,
		&s.UnconsumedBytes, &s.RetentionMs, &s.RetentionBytes); err != nil {
		return store.LagSample{}, err
	}
	return s, nil
}

// lagSampleRecord is a row of AddLagSamples.
type lagSampleRecord struct {
	TenantID        string `json:"tenant_id"`
	Group           string `json:"group_name"`
	TopicID         string `json:"topic_id"`
	Partition       int32  `json:"partition"`
	SampledAt       any    `json:"sampled_at"`
	TopicName       string `json:"topic_name"`
	Offline         bool   `json:"offline"`
	CommittedOffset int64  `json:"committed_offset"`
	LogStartOffset  int64  `json:"log_start_offset"`
	LogEndOffset    int64  `json:"log_end_offset"`
	LagMessages     int64  `json:"lag_messages"`
	LagAgeMs        int64  `json:"lag_age_ms"`
	PartitionBytes  int64  `json:"partition_bytes"`
	UnconsumedBytes int64  `json:"unconsumed_bytes"`
	RetentionMs     int64  `json:"retention_ms"`
	RetentionBytes  int64  `json:"retention_bytes"`
}

var lagSampleRecordColumns = []Column{
	{"tenant_id", "uuid"}, {"group_name", "text"}, {"topic_id", "uuid"}, {"partition", "integer"},
	{"sampled_at", "timestamptz"}, {"topic_name", "text"}, {"offline", "boolean"},
	{"committed_offset", "bigint"}, {"log_start_offset", "bigint"}, {"log_end_offset", "bigint"},
	{"lag_messages", "bigint"}, {"lag_age_ms", "bigint"}, {"partition_bytes", "bigint"},
	{"unconsumed_bytes", "bigint"}, {"retention_ms", "bigint"}, {"retention_bytes", "bigint"},
}

// AddLagSamples implements store.Store: one INSERT … SELECT of the batch as
// records (Dialect.Records), so the batch is one statement and one round
// trip.
func (s *Store) AddLagSamples(ctx context.Context, samples []store.LagSample) error {
	if len(samples) == 0 {
		return nil
	}
	recs := make([]lagSampleRecord, len(samples))
	for i, smp := range samples {
		smp, err := store.CheckLagSample(smp)
		if err != nil {
			return err
		}
		recs[i] = lagSampleRecord{smp.TenantID, smp.Group, smp.TopicID, smp.Partition, s.db.Time(smp.SampledAt), smp.TopicName, smp.Offline,
			smp.CommittedOffset, smp.LogStartOffset, smp.LogEndOffset, smp.LagMessages, smp.LagAgeMs, smp.PartitionBytes,
			smp.UnconsumedBytes, smp.RetentionMs, smp.RetentionBytes}
	}
	js, err := Records(recs)
	if err != nil {
		return err
	}
	_, err = s.db.Write().ExecContext(ctx,
		`INSERT INTO lag_samples (`+lagSampleColumns+`)
		 SELECT `+lagSampleColumns+` FROM `+s.db.Records("$1", "r", lagSampleRecordColumns...)+`
		 WHERE true ON CONFLICT (tenant_id, group_name, topic_id, partition, sampled_at) DO NOTHING`, js)
	return s.db.Translate("add lag samples", err)
}

// ListLagSamples implements store.Store.
func (s *Store) ListLagSamples(ctx context.Context, key store.LagKey, since, until time.Time) ([]store.LagSample, error) {
	tid, ok1 := store.CanonicalID(key.TenantID)
	pid, ok2 := store.CanonicalID(key.TopicID)
	if !ok1 || !ok2 {
		return nil, nil
	}
	q := `SELECT ` + lagSampleColumns + ` FROM lag_samples
		 WHERE tenant_id = $1 AND group_name = $2 AND topic_id = $3 AND partition = $4 AND sampled_at >= $5`
	args := []any{tid, key.Group, pid, key.Partition, s.db.Time(since)}
	if !until.IsZero() {
		q += ` AND sampled_at <= $6`
		args = append(args, s.db.Time(until))
	}
	rows, err := s.db.Read().QueryContext(ctx, q+` ORDER BY sampled_at`, args...)
	return Collect(s.db, rows, err, scanLagSample, "list lag samples")
}

// lagKeyRecord is a key of ListLagHistories, numbered by its position.
type lagKeyRecord struct {
	Pos       int    `json:"pos"`
	TenantID  string `json:"tenant_id"`
	Group     string `json:"group_name"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
}

// ListLagHistories implements store.Store: one query joining the keys, as
// records numbered by position, to the samples through their key index;
// only the columns the forecast takes travel back.
func (s *Store) ListLagHistories(ctx context.Context, keys []store.LagKey, since, until time.Time) ([][]forecast.Sample, error) {
	keys, ok, err := store.CheckLagHistoryKeys(keys)
	if err != nil {
		return nil, err
	}
	out := make([][]forecast.Sample, len(keys))
	var recs []lagKeyRecord
	for i, k := range keys {
		if ok[i] {
			recs = append(recs, lagKeyRecord{i, k.TenantID, k.Group, k.TopicID, k.Partition})
		}
	}
	if len(recs) == 0 {
		return out, nil
	}
	js, err := Records(recs)
	if err != nil {
		return nil, err
	}
	q := `SELECT k.pos, l.sampled_at, l.offline, l.committed_offset, l.log_start_offset, l.log_end_offset, l.lag_age_ms,
		 	l.partition_bytes, l.unconsumed_bytes, l.retention_ms, l.retention_bytes
		 FROM ` + s.db.Records("$1", "k", Column{"pos", "integer"}, Column{"tenant_id", "uuid"}, Column{"group_name", "text"},
		Column{"topic_id", "uuid"}, Column{"partition", "integer"}) + `
		 JOIN lag_samples l ON l.tenant_id = k.tenant_id AND l.group_name = k.group_name AND l.topic_id = k.topic_id AND l.partition = k.partition
		 WHERE l.sampled_at >= $2`
	args := []any{js, s.db.Time(since)}
	if !until.IsZero() {
		q += ` AND l.sampled_at <= $3`
		args = append(args, s.db.Time(until))
	}
	rows, err := s.db.Read().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.db.Translate("list lag histories", err)
	}
	defer rows.Close()
	var (
		i   int
		smp store.LagSample
	)
	for rows.Next() {
		if err := rows.Scan(&i, ScanTime(&smp.SampledAt), &smp.Offline, &smp.CommittedOffset, &smp.LogStartOffset, &smp.LogEndOffset, &smp.LagAgeMs,
			&smp.PartitionBytes, &smp.UnconsumedBytes, &smp.RetentionMs, &smp.RetentionBytes); err != nil {
			return nil, s.db.Translate("list lag histories", err)
		}
		out[i] = append(out[i], smp.Forecast())
	}
	if err := rows.Err(); err != nil {
		return nil, s.db.Translate("list lag histories", err)
	}
	for _, h := range out {
		store.SortForecastSamples(h)
	}
	return out, nil
}

// latestLagSamples is the newest sample of each key of tenant $1: on
// Postgres by DISTINCT ON; on SQLite by a max() aggregate, whose bare
// columns come from the row holding the maximum, here the newest sample of
// each group (key).
var latestLagSamples = engineSQL{
	postgres: `SELECT ` + lagSampleColumns + ` FROM (
		SELECT DISTINCT ON (tenant_id, group_name, topic_id, partition) ` + lagSampleColumns + `
		FROM lag_samples WHERE tenant_id = $1
		ORDER BY tenant_id, group_name, topic_id, partition, sampled_at DESC) latest
		ORDER BY tenant_id, group_name, topic_id, partition`,
	sqlite: `SELECT ` + lagSampleColumns + ` FROM (
		SELECT ` + lagSampleColumns + `, max(sampled_at) FROM lag_samples WHERE tenant_id = $1
		GROUP BY tenant_id, group_name, topic_id, partition)
		ORDER BY tenant_id, group_name, topic_id, partition`,
}

// allLatestLagSamples is the newest sample of every key. On Postgres a skip
// scan of the key index: one descent per key, from the key after the
// previous one, rather than a read of every sample (which DISTINCT ON
// would be). SQLite's max() aggregate walks the key index in order.
var allLatestLagSamples = engineSQL{
	postgres: `WITH RECURSIVE latest AS (
		(SELECT ` + lagSampleColumns + ` FROM lag_samples
		 ORDER BY tenant_id, group_name, topic_id, partition, sampled_at DESC LIMIT 1)
		UNION ALL
		SELECT n.* FROM latest p, LATERAL (
			SELECT ` + lagSampleColumns + ` FROM lag_samples l
			WHERE (l.tenant_id, l.group_name, l.topic_id, l.partition) > (p.tenant_id, p.group_name, p.topic_id, p.partition)
			ORDER BY l.tenant_id, l.group_name, l.topic_id, l.partition, l.sampled_at DESC LIMIT 1) n)
		SELECT ` + lagSampleColumns + ` FROM latest`,
	sqlite: `SELECT ` + lagSampleColumns + ` FROM (
		SELECT ` + lagSampleColumns + `, max(sampled_at) FROM lag_samples
		GROUP BY tenant_id, group_name, topic_id, partition)
		ORDER BY tenant_id, group_name, topic_id, partition`,
}

// LatestLagSamples implements store.Store.
func (s *Store) LatestLagSamples(ctx context.Context, tenantID string) ([]store.LagSample, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.db.Read().QueryContext(ctx, s.pick(latestLagSamples), tid)
	return Collect(s.db, rows, err, scanLagSample, "list latest lag samples")
}

// AllLatestLagSamples implements store.Store.
func (s *Store) AllLatestLagSamples(ctx context.Context) ([]store.LagSample, error) {
	rows, err := s.db.Read().QueryContext(ctx, s.pick(allLatestLagSamples))
	return Collect(s.db, rows, err, scanLagSample, "list latest lag samples")
}

// PruneLagSamples implements store.Store: the age cut through the
// sampled_at index, then the per-key cap by row number within each key.
func (s *Store) PruneLagSamples(ctx context.Context, before time.Time, maxPerKey int) (int64, error) {
	var n int64
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM lag_samples WHERE sampled_at < $1`, s.db.Time(before))
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
					FROM lag_samples) ranked
				WHERE rn > $1)`, maxPerKey)
		if err != nil {
			return err
		}
		m, err := res.RowsAffected()
		n += m
		return err
	})
	if err != nil {
		return 0, s.db.Translate("prune lag samples", err)
	}
	return n, nil
}

// ---- alerts ----

const alertColumns = `id, tenant_id, kind, group_name, topic_id, topic_name, partition, state, details,
	created_at, updated_at, fired_at, resolved_at, clear_since`

func scanAlert(r Scanner) (store.Alert, error) {
	var (
		a           store.Alert
		kind, state string
		details     []byte
	)
	if err := r.Scan(&a.ID, &a.TenantID, &kind, &a.Group, &a.TopicID, &a.TopicName, &a.Partition, &state, &details,
		ScanTime(&a.CreatedAt), ScanTime(&a.UpdatedAt), ScanTime(&a.FiredAt), ScanTime(&a.ResolvedAt), ScanTime(&a.ClearSince)); err != nil {
		return store.Alert{}, err
	}
	a.Details = details
	a.Kind, a.State = store.AlertKind(kind), store.AlertState(state)
	return a, nil
}

// TransitionAlert implements store.Store. Creating is an INSERT … ON
// CONFLICT DO NOTHING against the partial unique index of active alerts:
// of concurrent creations one inserts, the others (on Postgres waiting for
// it to commit) insert nothing and lose. Moving reads the alert FOR UPDATE,
// so concurrent movers queue on the row and each decides on the state the
// previous one committed.
func (s *Store) TransitionAlert(ctx context.Context, tr store.AlertTransition) (store.Alert, error) {
	tr, err := store.CheckAlertTransition(tr)
	if err != nil {
		return store.Alert{}, err
	}
	now := orNow(tr.At).Truncate(time.Millisecond)
	var out store.Alert
	err = s.db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		if tr.From == store.AlertNone {
			a := store.ApplyAlertTransition(store.Alert{}, tr, now)
			out, err = scanAlert(tx.QueryRowContext(ctx,
				`INSERT INTO alerts (`+alertColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, NULL, $12)
				 ON CONFLICT (tenant_id, kind, group_name, topic_id, partition) WHERE state <> 'resolved' DO NOTHING
				 RETURNING `+alertColumns,
				a.ID, a.TenantID, string(a.Kind), a.Group, a.TopicID, a.TopicName, a.Partition, string(a.State),
				string(a.Details), s.db.Time(a.CreatedAt), s.db.NullTime(a.FiredAt), s.db.NullTime(a.ClearSince)))
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("the %s alert of group %q on %s/%d is active already: %w",
					tr.Key.Kind, tr.Key.Group, tr.Key.TopicID, tr.Key.Partition, store.ErrConflict)
			}
			if err != nil {
				return err
			}
		} else {
			cur, err := scanAlert(tx.QueryRowContext(ctx,
				`SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND tenant_id = $2`+s.db.Lock(LockUpdate), tr.ID, tr.Key.TenantID))
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
				`UPDATE alerts SET state = $2, details = $3, updated_at = $4, fired_at = $5, resolved_at = $6, clear_since = $7
				 WHERE id = $1 RETURNING `+alertColumns,
				a.ID, string(a.State), string(a.Details), s.db.Time(a.UpdatedAt), s.db.NullTime(a.FiredAt),
				s.db.NullTime(a.ResolvedAt), s.db.NullTime(a.ClearSince)))
			if err != nil {
				return err
			}
		}
		if tr.From == tr.To || tr.Payload == nil {
			return nil
		}
		return s.enqueueForAlert(ctx, tx, out, tr.Payload)
	})
	if err != nil {
		return store.Alert{}, s.db.Translate("transition alert", err)
	}
	return out, nil
}

// alertRefreshRecord is a row of RefreshAlerts.
type alertRefreshRecord struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	Kind       string `json:"kind"`
	Group      string `json:"group_name"`
	TopicID    string `json:"topic_id"`
	Partition  int32  `json:"partition"`
	State      string `json:"state"`
	Details    string `json:"details"`
	At         any    `json:"at"`
	ClearSince any    `json:"clear_since"`
}

// RefreshAlerts implements store.Store: one UPDATE … FROM the refreshes as
// records, compare-and-set on id, tenant, key and state in its WHERE
// clause; the ids it returns are the refreshes applied.
func (s *Store) RefreshAlerts(ctx context.Context, refreshes []store.AlertTransition) ([]bool, error) {
	refreshes, err := store.CheckAlertRefreshes(refreshes)
	if err != nil {
		return nil, err
	}
	applied := make([]bool, len(refreshes))
	if len(refreshes) == 0 {
		return applied, nil
	}
	recs := make([]alertRefreshRecord, len(refreshes))
	for i, tr := range refreshes {
		recs[i] = alertRefreshRecord{tr.ID, tr.Key.TenantID, string(tr.Key.Kind), tr.Key.Group, tr.Key.TopicID, tr.Key.Partition,
			string(tr.From), string(tr.Details), s.db.Time(tr.At), s.db.NullTime(tr.ClearSince)}
	}
	js, err := Records(recs)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Write().QueryContext(ctx,
		`UPDATE alerts SET details = `+s.db.Cast("u.details", "json")+`, updated_at = u.at, clear_since = u.clear_since
		 FROM `+s.db.Records("$1", "u", Column{"id", "uuid"}, Column{"tenant_id", "uuid"}, Column{"kind", "text"},
			Column{"group_name", "text"}, Column{"topic_id", "uuid"}, Column{"partition", "integer"}, Column{"state", "text"},
			Column{"details", "text"}, Column{"at", "timestamptz"}, Column{"clear_since", "timestamptz"})+`
		 WHERE alerts.id = u.id AND alerts.tenant_id = u.tenant_id AND alerts.kind = u.kind AND alerts.group_name = u.group_name
		   AND alerts.topic_id = u.topic_id AND alerts.partition = u.partition AND alerts.state = u.state
		 RETURNING alerts.id`, js)
	got, err := Collect(s.db, rows, err, scanString, "refresh alerts")
	if err != nil {
		return nil, err
	}
	done := make(map[string]bool, len(got))
	for _, id := range got {
		done[id] = true
	}
	for i, tr := range refreshes {
		applied[i] = done[tr.ID]
	}
	return applied, nil
}

// enqueueForAlert enqueues, in tx, a delivery of a's new state to every
// webhook of its tenant. The webhooks are read FOR KEY SHARE: a concurrent
// DeleteWebhook waits for the transition to commit (and then deletes the
// deliveries with the webhook).
func (s *Store) enqueueForAlert(ctx context.Context, tx *sql.Tx, a store.Alert, payload func(store.Alert) ([]byte, error)) error {
	rows, err := tx.QueryContext(ctx, `SELECT id FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id`+s.db.Lock(LockKeyShare), a.TenantID)
	hooks, err := Collect(s.db, rows, err, scanString, "list webhooks")
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
		if _, err := tx.ExecContext(ctx, insertDelivery, s.deliveryArgs(d)...); err != nil {
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
	a, err := scanAlert(s.db.Read().QueryRowContext(ctx, `SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND tenant_id = $2`, aid, tid))
	if err != nil {
		return store.Alert{}, s.db.Translate("get alert", err)
	}
	return a, nil
}

// ListAlerts implements store.Store.
func (s *Store) ListAlerts(ctx context.Context, tenantID string, q store.AlertQuery) ([]store.Alert, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	query := `SELECT ` + alertColumns + ` FROM alerts WHERE tenant_id = $1`
	args := []any{tid}
	next := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.AfterID != "" {
		aid, ok := store.CanonicalID(q.AfterID)
		if !ok {
			return nil, fmt.Errorf("alert %q: %w", q.AfterID, store.ErrNotFound)
		}
		var found bool
		if err := s.db.Read().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM alerts WHERE id = $1 AND tenant_id = $2)`, aid, tid).Scan(&found); err != nil {
			return nil, s.db.Translate("list alerts", err)
		}
		if !found {
			return nil, fmt.Errorf("alert %s: %w", aid, store.ErrNotFound)
		}
		query += ` AND (created_at, id) < (SELECT created_at, id FROM alerts WHERE id = ` + next(aid) + `)`
	}
	if len(q.States) > 0 {
		states := make([]string, len(q.States))
		for i, st := range q.States {
			states[i] = string(st)
		}
		query += ` AND ` + s.db.In("state", next(s.db.Strings(states)))
	}
	if q.Group != "" {
		query += ` AND group_name = ` + next(q.Group)
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT ` + next(store.PageSize(q.Limit))
	rows, err := s.db.Read().QueryContext(ctx, query, args...)
	return Collect(s.db, rows, err, scanAlert, "list alerts")
}

// ListActiveAlerts implements store.Store.
func (s *Store) ListActiveAlerts(ctx context.Context) ([]store.Alert, error) {
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+alertColumns+` FROM alerts WHERE state <> 'resolved'
		 ORDER BY tenant_id, group_name, topic_id, partition, kind`)
	return Collect(s.db, rows, err, scanAlert, "list active alerts")
}

// ---- alert policies ----

const alertPolicyColumns = `tenant_id, expiry_risk_threshold_ms, updated_at`

func scanAlertPolicy(r Scanner) (store.AlertPolicy, error) {
	var (
		p         store.AlertPolicy
		threshold int64
	)
	if err := r.Scan(&p.TenantID, &threshold, ScanTime(&p.UpdatedAt)); err != nil {
		return store.AlertPolicy{}, err
	}
	p.ExpiryRiskThreshold = time.Duration(threshold) * time.Millisecond
	return p, nil
}

// GetAlertPolicy implements store.Store.
func (s *Store) GetAlertPolicy(ctx context.Context, tenantID string) (store.AlertPolicy, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.AlertPolicy{}, store.ErrNotFound
	}
	p, err := scanAlertPolicy(s.db.Read().QueryRowContext(ctx, `SELECT `+alertPolicyColumns+` FROM alert_policies WHERE tenant_id = $1`, tid))
	if err != nil {
		return store.AlertPolicy{}, s.db.Translate("get alert policy", err)
	}
	return p, nil
}

// PutAlertPolicy implements store.Store: one upsert.
func (s *Store) PutAlertPolicy(ctx context.Context, p store.AlertPolicy) (store.AlertPolicy, error) {
	p, err := store.CheckAlertPolicy(p)
	if err != nil {
		return store.AlertPolicy{}, err
	}
	out, err := scanAlertPolicy(s.db.Write().QueryRowContext(ctx,
		`INSERT INTO alert_policies (`+alertPolicyColumns+`) VALUES ($1, $2, $3)
		 ON CONFLICT (tenant_id) DO UPDATE SET expiry_risk_threshold_ms = excluded.expiry_risk_threshold_ms, updated_at = excluded.updated_at
		 RETURNING `+alertPolicyColumns,
		p.TenantID, p.ExpiryRiskThreshold.Milliseconds(), s.db.Time(orNow(p.UpdatedAt))))
	if err != nil {
		return store.AlertPolicy{}, s.db.Translate("put alert policy", err)
	}
	return out, nil
}

// ListAlertPolicies implements store.Store.
func (s *Store) ListAlertPolicies(ctx context.Context) ([]store.AlertPolicy, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+alertPolicyColumns+` FROM alert_policies ORDER BY tenant_id`)
	return Collect(s.db, rows, err, scanAlertPolicy, "list alert policies")
}
