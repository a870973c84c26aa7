package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
)

// ---- lag samples ----

const lagSampleColumns = `tenant_id, group_name, topic_id, partition, sampled_at, topic_name, offline,
	committed_offset, log_start_offset, log_end_offset, lag_messages, lag_age_ms, partition_bytes,
	unconsumed_bytes, retention_ms, retention_bytes`

func scanLagSample(r pgx.Row) (store.LagSample, error) {
	var s store.LagSample
	if err := r.Scan(&s.TenantID, &s.Group, &s.TopicID, &s.Partition, &s.SampledAt, &s.TopicName, &s.Offline,
		&s.CommittedOffset, &s.LogStartOffset, &s.LogEndOffset, &s.LagMessages, &s.LagAgeMs, &s.PartitionBytes,
		&s.UnconsumedBytes, &s.RetentionMs, &s.RetentionBytes); err != nil {
		return store.LagSample{}, err
	}
	s.SampledAt = s.SampledAt.UTC()
	return s, nil
}

// AddLagSamples implements store.Store: one INSERT … SELECT FROM unnest of
// column arrays, so the batch is one statement and one round trip. Ids
// travel as text[] cast to uuid[] in SQL: a uuid[] parameter makes pgx try,
// and fail with a formatted error, another encoding of every []string first
// (most of a round's CPU with thousands of samples).
func (s *Store) AddLagSamples(ctx context.Context, samples []store.LagSample) error {
	if len(samples) == 0 {
		return nil
	}
	n := len(samples)
	var (
		tenants, groups, topics, names = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		partitions                     = make([]int32, n)
		times                          = make([]time.Time, n)
		offline                        = make([]bool, n)
		committed, start, end          = make([]int64, n), make([]int64, n), make([]int64, n)
		lag, age, bytes, unconsumed    = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		retMs, retBytes                = make([]int64, n), make([]int64, n)
	)
	for i, smp := range samples {
		smp, err := store.CheckLagSample(smp)
		if err != nil {
			return err
		}
		tenants[i], groups[i], topics[i], names[i], partitions[i] = smp.TenantID, smp.Group, smp.TopicID, smp.TopicName, smp.Partition
		times[i], offline[i] = ts(smp.SampledAt), smp.Offline
		committed[i], start[i], end[i] = smp.CommittedOffset, smp.LogStartOffset, smp.LogEndOffset
		lag[i], age[i], bytes[i], unconsumed[i] = smp.LagMessages, smp.LagAgeMs, smp.PartitionBytes, smp.UnconsumedBytes
		retMs[i], retBytes[i] = smp.RetentionMs, smp.RetentionBytes
	}
	_, err := s.pool.Exec(ctx,
		`INSERT INTO lag_samples (`+lagSampleColumns+`)
		 SELECT * FROM unnest($1::text[]::uuid[], $2::text[], $3::text[]::uuid[], $4::integer[], $5::timestamptz[], $6::text[], $7::boolean[],
		 	$8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[],
		 	$14::bigint[], $15::bigint[], $16::bigint[])
		 ON CONFLICT (tenant_id, group_name, topic_id, partition, sampled_at) DO NOTHING`,
		tenants, groups, topics, partitions, times, names, offline,
		committed, start, end, lag, age, bytes, unconsumed, retMs, retBytes)
	return translate("add lag samples", err)
}

// ListLagSamples implements store.Store.
func (s *Store) ListLagSamples(ctx context.Context, key store.LagKey, since, until time.Time) ([]store.LagSample, error) {
	tid, ok1 := store.CanonicalID(key.TenantID)
	pid, ok2 := store.CanonicalID(key.TopicID)
	if !ok1 || !ok2 {
		return nil, nil
	}
	var upper pgtype.Timestamptz
	if !until.IsZero() {
		upper = pgtype.Timestamptz{Time: ts(until), Valid: true}
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+lagSampleColumns+` FROM lag_samples
		 WHERE tenant_id = $1 AND group_name = $2 AND topic_id = $3 AND partition = $4
		   AND sampled_at >= $5 AND ($6::timestamptz IS NULL OR sampled_at <= $6)
		 ORDER BY sampled_at`,
		tid, key.Group, pid, key.Partition, ts(since), upper)
	if err != nil {
		return nil, translate("list lag samples", err)
	}
	return collect(rows, scanLagSample, "list lag samples")
}

// ListLagHistories implements store.Store: one query joining the keys, as
// column arrays numbered by position, to the samples through their key
// index; only the columns the forecast takes travel back.
func (s *Store) ListLagHistories(ctx context.Context, keys []store.LagKey, since, until time.Time) ([][]forecast.Sample, error) {
	keys, ok, err := store.CheckLagHistoryKeys(keys)
	if err != nil {
		return nil, err
	}
	out := make([][]forecast.Sample, len(keys))
	var (
		pos                    []int32
		tenants, groups, topic []string
		partitions             []int32
	)
	for i, k := range keys {
		if ok[i] {
			pos, tenants, groups, topic, partitions = append(pos, int32(i)), append(tenants, k.TenantID), append(groups, k.Group),
				append(topic, k.TopicID), append(partitions, k.Partition)
		}
	}
	if len(pos) == 0 {
		return out, nil
	}
	var upper pgtype.Timestamptz
	if !until.IsZero() {
		upper = pgtype.Timestamptz{Time: ts(until), Valid: true}
	}
	rows, err := s.pool.Query(ctx,
		`SELECT k.pos, l.sampled_at, l.offline, l.committed_offset, l.log_start_offset, l.log_end_offset, l.lag_age_ms,
		 	l.partition_bytes, l.unconsumed_bytes, l.retention_ms, l.retention_bytes
		 FROM unnest($1::integer[], $2::text[]::uuid[], $3::text[], $4::text[]::uuid[], $5::integer[]) AS k(pos, tenant_id, group_name, topic_id, partition)
		 JOIN lag_samples l ON l.tenant_id = k.tenant_id AND l.group_name = k.group_name AND l.topic_id = k.topic_id AND l.partition = k.partition
		 WHERE l.sampled_at >= $6 AND ($7::timestamptz IS NULL OR l.sampled_at <= $7)`,
		pos, tenants, groups, topic, partitions, ts(since), upper)
	if err != nil {
		return nil, translate("list lag histories", err)
	}
	defer rows.Close()
	var (
		i   int32
		smp store.LagSample
	)
	for rows.Next() {
		if err := rows.Scan(&i, &smp.SampledAt, &smp.Offline, &smp.CommittedOffset, &smp.LogStartOffset, &smp.LogEndOffset, &smp.LagAgeMs,
			&smp.PartitionBytes, &smp.UnconsumedBytes, &smp.RetentionMs, &smp.RetentionBytes); err != nil {
			return nil, translate("list lag histories", err)
		}
		smp.SampledAt = smp.SampledAt.UTC()
		out[i] = append(out[i], smp.Forecast())
	}
	if err := rows.Err(); err != nil {
		return nil, translate("list lag histories", err)
	}
	for _, h := range out {
		store.SortForecastSamples(h)
	}
	return out, nil
}

// latestLagSamples is the newest sample of each key, of one tenant or (tenant
// NULL) of all.
const latestLagSamples = `SELECT ` + lagSampleColumns + ` FROM (
	SELECT DISTINCT ON (tenant_id, group_name, topic_id, partition) ` + lagSampleColumns + `
	FROM lag_samples WHERE ($1::uuid IS NULL OR tenant_id = $1)
	ORDER BY tenant_id, group_name, topic_id, partition, sampled_at DESC) latest
	ORDER BY tenant_id, group_name, topic_id, partition`

// LatestLagSamples implements store.Store.
func (s *Store) LatestLagSamples(ctx context.Context, tenantID string) ([]store.LagSample, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, latestLagSamples, tid)
	if err != nil {
		return nil, translate("list latest lag samples", err)
	}
	return collect(rows, scanLagSample, "list latest lag samples")
}

// allLatestLagSamples is the newest sample of each key as a skip scan of
// the key index: one descent per key, from the key after the previous one,
// rather than a read of every sample.
var allLatestLagSamples = `WITH RECURSIVE latest AS (
	(SELECT ` + lagSampleColumns + ` FROM lag_samples
	 ORDER BY tenant_id, group_name, topic_id, partition, sampled_at DESC LIMIT 1)
	UNION ALL
	SELECT n.* FROM latest p, LATERAL (
		SELECT ` + lagSampleColumns + ` FROM lag_samples l
		WHERE (l.tenant_id, l.group_name, l.topic_id, l.partition) > (p.tenant_id, p.group_name, p.topic_id, p.partition)
		ORDER BY l.tenant_id, l.group_name, l.topic_id, l.partition, l.sampled_at DESC LIMIT 1) n)
	SELECT ` + lagSampleColumns + ` FROM latest`

// AllLatestLagSamples implements store.Store.
func (s *Store) AllLatestLagSamples(ctx context.Context) ([]store.LagSample, error) {
	rows, err := s.pool.Query(ctx, allLatestLagSamples)
	if err != nil {
		return nil, translate("list latest lag samples", err)
	}
	return collect(rows, scanLagSample, "list latest lag samples")
}

// PruneLagSamples implements store.Store: the age cut through the
// sampled_at index, then the per-key cap by row number within each key.
func (s *Store) PruneLagSamples(ctx context.Context, before time.Time, maxPerKey int) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM lag_samples WHERE sampled_at < $1`, ts(before))
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if maxPerKey <= 0 {
			return nil
		}
		tag, err = tx.Exec(ctx,
			`DELETE FROM lag_samples d USING (
				SELECT tenant_id, group_name, topic_id, partition, sampled_at FROM (
					SELECT tenant_id, group_name, topic_id, partition, sampled_at,
						row_number() OVER (PARTITION BY tenant_id, group_name, topic_id, partition ORDER BY sampled_at DESC) AS rn
					FROM lag_samples) ranked
				WHERE rn > $1) old
			 WHERE d.tenant_id = old.tenant_id AND d.group_name = old.group_name AND d.topic_id = old.topic_id
			   AND d.partition = old.partition AND d.sampled_at = old.sampled_at`, maxPerKey)
		if err != nil {
			return err
		}
		n += tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, translate("prune lag samples", err)
	}
	return n, nil
}

// ---- alerts ----

const alertColumns = `id, tenant_id, kind, group_name, topic_id, topic_name, partition, state, details,
	created_at, updated_at, fired_at, resolved_at, clear_since`

func scanAlert(r pgx.Row) (store.Alert, error) {
	var (
		a               store.Alert
		kind, state     string
		details         []byte
		fired, resolved pgtype.Timestamptz
		clear           pgtype.Timestamptz
	)
	if err := r.Scan(&a.ID, &a.TenantID, &kind, &a.Group, &a.TopicID, &a.TopicName, &a.Partition, &state, &details,
		&a.CreatedAt, &a.UpdatedAt, &fired, &resolved, &clear); err != nil {
		return store.Alert{}, err
	}
	a.Details = details
	a.ClearSince = fromNullTS(clear)
	a.Kind, a.State = store.AlertKind(kind), store.AlertState(state)
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	a.FiredAt, a.ResolvedAt = fromNullTS(fired), fromNullTS(resolved)
	return a, nil
}

// TransitionAlert implements store.Store. Creating is an INSERT … ON
// CONFLICT DO NOTHING against the partial unique index of active alerts:
// of concurrent creations one inserts, the others (waiting for it to commit)
// insert nothing and lose. Moving reads the alert FOR UPDATE, so concurrent
// movers queue on the row and each decides on the state the previous one
// committed.
func (s *Store) TransitionAlert(ctx context.Context, tr store.AlertTransition) (store.Alert, error) {
	tr, err := store.CheckAlertTransition(tr)
	if err != nil {
		return store.Alert{}, err
	}
	now := ts(orNow(tr.At))
	var out store.Alert
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if tr.From == store.AlertNone {
			a := store.ApplyAlertTransition(store.Alert{}, tr, now)
			out, err = scanAlert(tx.QueryRow(ctx,
				`INSERT INTO alerts (`+alertColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11, NULL, $12)
				 ON CONFLICT (tenant_id, kind, group_name, topic_id, partition) WHERE state <> 'resolved' DO NOTHING
				 RETURNING `+alertColumns,
				a.ID, a.TenantID, string(a.Kind), a.Group, a.TopicID, a.TopicName, a.Partition, string(a.State),
				string(a.Details), a.CreatedAt, nullTS(a.FiredAt), nullTS(a.ClearSince)))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("the %s alert of group %q on %s/%d is active already: %w",
					tr.Key.Kind, tr.Key.Group, tr.Key.TopicID, tr.Key.Partition, store.ErrConflict)
			}
			if err != nil {
				return err
			}
		} else {
			cur, err := scanAlert(tx.QueryRow(ctx,
				`SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND tenant_id = $2 FOR UPDATE`, tr.ID, tr.Key.TenantID))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("alert %s: %w", tr.ID, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
			a, err := store.DecideAlertTransition(cur, tr, now)
			if err != nil {
				return err
			}
			out, err = scanAlert(tx.QueryRow(ctx,
				`UPDATE alerts SET state = $2, details = $3, updated_at = $4, fired_at = $5, resolved_at = $6, clear_since = $7
				 WHERE id = $1 RETURNING `+alertColumns,
				a.ID, string(a.State), string(a.Details), a.UpdatedAt, nullTS(a.FiredAt), nullTS(a.ResolvedAt), nullTS(a.ClearSince)))
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

// RefreshAlerts implements store.Store: one UPDATE … FROM unnest of column
// arrays, compare-and-set on id, tenant, key and state in its WHERE clause;
// the ids it returns are the refreshes applied.
func (s *Store) RefreshAlerts(ctx context.Context, refreshes []store.AlertTransition) ([]bool, error) {
	refreshes, err := store.CheckAlertRefreshes(refreshes)
	if err != nil {
		return nil, err
	}
	applied := make([]bool, len(refreshes))
	if len(refreshes) == 0 {
		return applied, nil
	}
	n := len(refreshes)
	var (
		ids, tenants, kinds, groups, topics, states, details = make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		partitions = make([]int32, n)
		times      = make([]time.Time, n)
		clear      = make([]pgtype.Timestamptz, n)
	)
	for i, tr := range refreshes {
		ids[i], tenants[i], kinds[i], groups[i], topics[i], partitions[i] = tr.ID, tr.Key.TenantID, string(tr.Key.Kind), tr.Key.Group, tr.Key.TopicID, tr.Key.Partition
		states[i], details[i], times[i], clear[i] = string(tr.From), string(tr.Details), ts(tr.At), nullTS(tr.ClearSince)
	}
	rows, err := s.pool.Query(ctx,
		`UPDATE alerts a SET details = u.details::json, updated_at = u.at, clear_since = u.clear_since
		 FROM unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[], $4::text[], $5::text[]::uuid[], $6::integer[], $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[])
		 	AS u(id, tenant_id, kind, group_name, topic_id, partition, state, details, at, clear_since)
		 WHERE a.id = u.id AND a.tenant_id = u.tenant_id AND a.kind = u.kind AND a.group_name = u.group_name
		   AND a.topic_id = u.topic_id AND a.partition = u.partition AND a.state = u.state
		 RETURNING a.id::text`,
		ids, tenants, kinds, groups, topics, partitions, states, details, times, clear)
	if err != nil {
		return nil, translate("refresh alerts", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate("refresh alerts", err)
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
func enqueueForAlert(ctx context.Context, tx pgx.Tx, a store.Alert, payload func(store.Alert) ([]byte, error)) error {
	rows, err := tx.Query(ctx, `SELECT id FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id FOR KEY SHARE`, a.TenantID)
	if err != nil {
		return err
	}
	hooks, err := pgx.CollectRows(rows, pgx.RowTo[string])
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
		if _, err := tx.Exec(ctx, insertDelivery, deliveryArgs(d)...); err != nil {
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
	a, err := scanAlert(s.pool.QueryRow(ctx, `SELECT `+alertColumns+` FROM alerts WHERE id = $1 AND tenant_id = $2`, aid, tid))
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
	var after pgtype.UUID
	if q.AfterID != "" {
		aid, ok := store.CanonicalID(q.AfterID)
		if !ok {
			return nil, fmt.Errorf("alert %q: %w", q.AfterID, store.ErrNotFound)
		}
		if err := after.Scan(aid); err != nil {
			return nil, fmt.Errorf("list alerts: %w", err)
		}
		var found bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM alerts WHERE id = $1 AND tenant_id = $2)`, aid, tid).Scan(&found); err != nil {
			return nil, translate("list alerts", err)
		}
		if !found {
			return nil, fmt.Errorf("alert %s: %w", aid, store.ErrNotFound)
		}
	}
	states := make([]string, len(q.States))
	for i, st := range q.States {
		states[i] = string(st)
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+alertColumns+` FROM alerts a
		 WHERE tenant_id = $1 AND (cardinality($2::text[]) = 0 OR state = ANY ($2))
		   AND ($3::uuid IS NULL OR (created_at, id) < (SELECT created_at, id FROM alerts WHERE id = $3))
		   AND ($5 = '' OR group_name = $5)
		 ORDER BY created_at DESC, id DESC LIMIT $4`,
		tid, states, after, store.PageSize(q.Limit), q.Group)
	if err != nil {
		return nil, translate("list alerts", err)
	}
	return collect(rows, scanAlert, "list alerts")
}

// ListActiveAlerts implements store.Store.
func (s *Store) ListActiveAlerts(ctx context.Context) ([]store.Alert, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT `+alertColumns+` FROM alerts WHERE state <> 'resolved'
		 ORDER BY tenant_id, group_name, topic_id, partition, kind`)
	if err != nil {
		return nil, translate("list active alerts", err)
	}
	return collect(rows, scanAlert, "list active alerts")
}

// ---- alert policies ----

const alertPolicyColumns = `tenant_id, expiry_risk_threshold_ms, updated_at`

func scanAlertPolicy(r pgx.Row) (store.AlertPolicy, error) {
	var (
		p         store.AlertPolicy
		threshold int64
	)
	if err := r.Scan(&p.TenantID, &threshold, &p.UpdatedAt); err != nil {
		return store.AlertPolicy{}, err
	}
	p.ExpiryRiskThreshold, p.UpdatedAt = time.Duration(threshold)*time.Millisecond, p.UpdatedAt.UTC()
	return p, nil
}

// GetAlertPolicy implements store.Store.
func (s *Store) GetAlertPolicy(ctx context.Context, tenantID string) (store.AlertPolicy, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.AlertPolicy{}, store.ErrNotFound
	}
	p, err := scanAlertPolicy(s.pool.QueryRow(ctx, `SELECT `+alertPolicyColumns+` FROM alert_policies WHERE tenant_id = $1`, tid))
	if err != nil {
		return store.AlertPolicy{}, translate("get alert policy", err)
	}
	return p, nil
}

// PutAlertPolicy implements store.Store: one upsert.
func (s *Store) PutAlertPolicy(ctx context.Context, p store.AlertPolicy) (store.AlertPolicy, error) {
	p, err := store.CheckAlertPolicy(p)
	if err != nil {
		return store.AlertPolicy{}, err
	}
	out, err := scanAlertPolicy(s.pool.QueryRow(ctx,
		`INSERT INTO alert_policies (`+alertPolicyColumns+`) VALUES ($1, $2, $3)
		 ON CONFLICT (tenant_id) DO UPDATE SET expiry_risk_threshold_ms = excluded.expiry_risk_threshold_ms, updated_at = excluded.updated_at
		 RETURNING `+alertPolicyColumns,
		p.TenantID, p.ExpiryRiskThreshold.Milliseconds(), ts(orNow(p.UpdatedAt))))
	if err != nil {
		return store.AlertPolicy{}, translate("put alert policy", err)
	}
	return out, nil
}

// ListAlertPolicies implements store.Store.
func (s *Store) ListAlertPolicies(ctx context.Context) ([]store.AlertPolicy, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+alertPolicyColumns+` FROM alert_policies ORDER BY tenant_id`)
	if err != nil {
		return nil, translate("list alert policies", err)
	}
	return collect(rows, scanAlertPolicy, "list alert policies")
}
