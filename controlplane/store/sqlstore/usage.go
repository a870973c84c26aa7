package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants/system"
)

// Usage metering and billing (store.UsageStore), written once. The
// exactly-once writes are compare-and-sets on a row's previous value, not
// row locks: the report key is an INSERT … ON CONFLICT DO NOTHING (a
// concurrent insert of the same key waits for the first to commit, then
// changes nothing), a cursor or meter moves only by an UPDATE whose WHERE
// names the value read (under READ COMMITTED a concurrent UPDATE of the row
// waits, re-evaluates the WHERE on the committed row and changes nothing),
// and an invoice is finalized only by an UPDATE … WHERE status = 'draft' or
// an insert. The loser re-reads and decides again. The only lock taken is
// the broker row's LockShare (a fence read against a re-registration).
// Rows are written in one order (broker, key, cursors by topic and
// partition, then usage rows by tenant, hour and dimension), so concurrent
// transactions do not deadlock on Postgres.

// usageTx is a write transaction of the usage and billing methods.
type usageTx struct{ tx *sql.Tx }

// exec runs a statement and answers the rows it changed.
func (t usageTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t usageTx) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

func (t usageTx) row(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// usageInTx runs fn in a write transaction (s.db.InTx), its error
// translated with op.
func (s *Store) usageInTx(ctx context.Context, op string, fn func(tx usageTx) error) error {
	return s.db.Translate(op, s.db.InTx(ctx, func(tx *sql.Tx) error { return fn(usageTx{tx}) }))
}

func (s *Store) usageQuery(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return s.db.Read().QueryContext(ctx, query, args...)
}

func (s *Store) usageRow(ctx context.Context, query string, args ...any) *sql.Row {
	return s.db.Read().QueryRowContext(ctx, query, args...)
}

// usageTime is a stored unix-ms time.
func usageTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// usageCASRetries bounds the re-reads of a cursor or invoice a concurrent
// writer changed under a compare-and-set (each retry means another writer
// made progress).
const usageCASRetries = 1000

// usageAdds sums what one transaction adds to hourly rows, so that it adds
// to each row once and in one order (tenant, hour, dimension): concurrent
// transactions then lock the rows they share in the same order and never
// deadlock.
type usageAdds struct {
	m        map[usageRowKey]int64
	overflow *usageRowKey
}

func newUsageAdds() *usageAdds { return &usageAdds{m: map[usageRowKey]int64{}} }

type usageRowKey struct {
	tenant string
	hour   int64
	dim    store.UsageDimension
}

func (a *usageAdds) add(tenant string, hour int64, d store.UsageDimension, amount int64) {
	if amount == 0 {
		return
	}
	k := usageRowKey{tenant, hour, d}
	if a.m[k] > math.MaxInt64-amount {
		a.overflow = &k
	}
	a.m[k] += amount
}

// apply adds every sum to its row, in key order.
func (a *usageAdds) apply(ctx context.Context, tx usageTx) error {
	if k := a.overflow; k != nil {
		return fmt.Errorf("add usage: %s of tenant %s in hour %s overflows int64", k.dim, k.tenant, usageTime(k.hour))
	}
	keys := make([]usageRowKey, 0, len(a.m))
	for k := range a.m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y usageRowKey) int {
		return cmp.Or(strings.Compare(x.tenant, y.tenant), cmp.Compare(x.hour, y.hour), strings.Compare(string(x.dim), string(y.dim)))
	})
	for _, k := range keys {
		if _, err := tx.exec(ctx, `INSERT INTO usage_hourly (tenant_id, hour_ms, dimension, amount) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant_id, hour_ms, dimension) DO UPDATE SET amount = usage_hourly.amount + excluded.amount`,
			k.tenant, k.hour, string(k.dim), a.m[k]); err != nil {
			return fmt.Errorf("add usage: %w", err)
		}
	}
	return nil
}

type partKey struct {
	topic string
	part  int32
}

// ApplyUsageReport implements store.UsageStore.
func (s *Store) ApplyUsageReport(ctx context.Context, r store.UsageReport) (store.UsageReportResult, error) {
	r, err := store.CheckUsageReport(r)
	if err != nil {
		return store.UsageReportResult{}, err
	}
	at := r.At.UTC().Truncate(time.Millisecond)
	hour := store.HourOf(at).UnixMilli()
	var res store.UsageReportResult
	err = s.usageInTx(ctx, "apply usage report", func(tx usageTx) error {
		res = store.UsageReportResult{}
		var epoch int64
		// A fence read: a registration (a new epoch) waits for the report.
		switch err := tx.row(ctx, `SELECT epoch FROM brokers WHERE id = $1`+s.db.Lock(LockShare), r.BrokerID).Scan(&epoch); {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("broker %d: %w", r.BrokerID, store.ErrNotFound)
		case err != nil:
			return fmt.Errorf("apply usage report: %w", err)
		case epoch != r.BrokerEpoch:
			return fmt.Errorf("broker %d is at epoch %d, not %d: %w", r.BrokerID, epoch, r.BrokerEpoch, store.ErrConflict)
		}
		var newest sql.NullInt64
		if err := tx.row(ctx, `SELECT MAX(sequence) FROM usage_report_keys WHERE broker_id = $1 AND broker_epoch = $2`,
			r.BrokerID, r.BrokerEpoch).Scan(&newest); err != nil {
			return fmt.Errorf("apply usage report: %w", err)
		}
		if newest.Valid && r.Sequence < newest.Int64-store.UsageReportWindow {
			res.Duplicate = true
		} else {
			n, err := tx.exec(ctx, `INSERT INTO usage_report_keys (broker_id, broker_epoch, sequence, applied_at) VALUES ($1, $2, $3, $4)
				ON CONFLICT (broker_id, broker_epoch, sequence) DO NOTHING`, r.BrokerID, r.BrokerEpoch, r.Sequence, at.UnixMilli())
			if err != nil {
				return fmt.Errorf("apply usage report: %w", err)
			}
			res.Duplicate = n == 0
		}
		// The partitions named, with their topics' tenants (absent: unknown).
		tenantOf := map[partKey]string{}
		var named []partKey
		for _, g := range r.Ingress {
			k := partKey{g.TopicID, g.Partition}
			if _, ok := tenantOf[k]; ok {
				continue
			}
			var tenant string
			err := tx.row(ctx, `SELECT CAST(t.tenant_id AS TEXT) FROM partitions p JOIN topics t ON t.id = p.topic_id
				WHERE p.topic_id = $1 AND p.partition = $2`, g.TopicID, g.Partition).Scan(&tenant)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				tenant = ""
				// A deleted topic's cursors are of no more use.
				if _, err := tx.exec(ctx, `DELETE FROM usage_ingress_cursors WHERE topic_id = $1 AND partition = $2`, g.TopicID, g.Partition); err != nil {
					return fmt.Errorf("apply usage report: %w", err)
				}
			case err != nil:
				return fmt.Errorf("apply usage report: %w", err)
			default:
				named = append(named, k)
			}
			tenantOf[k] = tenant
		}
		if !res.Duplicate {
			if err := s.applyReport(ctx, tx, r, at, hour, tenantOf); err != nil {
				return err
			}
		}
		slices.SortFunc(named, func(a, b partKey) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part)) })
		for _, k := range named {
			c, found, err := readCursor(ctx, tx, k)
			if err != nil {
				return err
			}
			if found {
				res.Cursors = append(res.Cursors, c)
			}
		}
		return nil
	})
	if err != nil {
		return store.UsageReportResult{}, err
	}
	return res, nil
}

func (s *Store) applyReport(ctx context.Context, tx usageTx, r store.UsageReport, at time.Time, hour int64, tenantOf map[partKey]string) error {
	// Forget the keys no retry can need: older epochs', and those out of the window.
	if _, err := tx.exec(ctx, `DELETE FROM usage_report_keys WHERE broker_id = $1 AND (broker_epoch < $2 OR (broker_epoch = $2 AND sequence < $3))`,
		r.BrokerID, r.BrokerEpoch, r.Sequence-store.UsageReportWindow); err != nil {
		return fmt.Errorf("apply usage report: %w", err)
	}
	adds := newUsageAdds()
	for _, c := range r.Counters {
		adds.add(c.TenantID, hour, store.UsageEgressBytes, c.EgressBytes)
		adds.add(c.TenantID, hour, store.UsageRequests, c.Requests)
	}
	// Cursors in (topic, partition) order, each partition's ranges in the
	// report's order, then the usage rows: every report locks rows in one
	// order.
	ranges := slices.Clone(r.Ingress)
	slices.SortStableFunc(ranges, func(a, b store.IngressRange) int {
		return cmp.Or(strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	for _, g := range ranges {
		tenant := tenantOf[partKey{g.TopicID, g.Partition}]
		if tenant == "" {
			continue
		}
		applied, err := advanceCursor(ctx, tx, g, at)
		if err != nil {
			return err
		}
		if applied {
			adds.add(tenant, hour, store.UsageIngressBytes, g.Bytes)
		}
	}
	return adds.apply(ctx, tx)
}

func readCursor(ctx context.Context, tx usageTx, k partKey) (store.IngressCursor, bool, error) {
	c := store.IngressCursor{TopicID: k.topic, Partition: k.part}
	err := tx.row(ctx, `SELECT leader_epoch, next_offset FROM usage_ingress_cursors WHERE topic_id = $1 AND partition = $2`,
		k.topic, k.part).Scan(&c.LeaderEpoch, &c.NextOffset)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.IngressCursor{}, false, nil
	case err != nil:
		return store.IngressCursor{}, false, fmt.Errorf("read ingress cursor: %w", err)
	}
	return c, true, nil
}

// advanceCursor decides g against its partition's cursor and writes the
// outcome, compare-and-set on the cursor read: when another report moved
// it meanwhile, it reads again and decides again.
func advanceCursor(ctx context.Context, tx usageTx, g store.IngressRange, at time.Time) (bool, error) {
	k := partKey{g.TopicID, g.Partition}
	for range usageCASRetries {
		cur, found, err := readCursor(ctx, tx, k)
		if err != nil {
			return false, err
		}
		next, apply := store.DecideIngressRange(cur, found, g)
		var n int64
		switch {
		case !found:
			n, err = tx.exec(ctx, `INSERT INTO usage_ingress_cursors (topic_id, partition, leader_epoch, next_offset, updated_at)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT (topic_id, partition) DO NOTHING`,
				g.TopicID, g.Partition, next.LeaderEpoch, next.NextOffset, at.UnixMilli())
		case next == cur:
			return false, nil
		default:
			n, err = tx.exec(ctx, `UPDATE usage_ingress_cursors SET leader_epoch = $1, next_offset = $2, updated_at = $3
				WHERE topic_id = $4 AND partition = $5 AND leader_epoch = $6 AND next_offset = $7`,
				next.LeaderEpoch, next.NextOffset, at.UnixMilli(), g.TopicID, g.Partition, cur.LeaderEpoch, cur.NextOffset)
		}
		if err != nil {
			return false, fmt.Errorf("advance ingress cursor: %w", err)
		}
		if n == 1 {
			return apply, nil
		}
	}
	return false, fmt.Errorf("advance ingress cursor of %s/%d: %d concurrent changes", g.TopicID, g.Partition, usageCASRetries)
}

// ListUsage implements store.UsageStore.
func (s *Store) ListUsage(ctx context.Context, tenantID string, from, to time.Time) ([]store.UsageRow, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.usageQuery(ctx, `SELECT hour_ms, dimension, amount FROM usage_hourly
		WHERE tenant_id = $1 AND hour_ms >= $2 AND hour_ms < $3`, id, store.HourOf(from).UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("list usage: %w", err)
	}
	defer rows.Close()
	var out []store.UsageRow
	for rows.Next() {
		var (
			hour int64
			dim  string
			r    = store.UsageRow{TenantID: id}
		)
		if err := rows.Scan(&hour, &dim, &r.Amount); err != nil {
			return nil, fmt.Errorf("list usage: %w", err)
		}
		r.Hour, r.Dimension = usageTime(hour), store.UsageDimension(dim)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list usage: %w", err)
	}
	slices.SortFunc(out, func(a, b store.UsageRow) int {
		return cmp.Or(a.Hour.Compare(b.Hour), cmp.Compare(a.Dimension.Order(), b.Dimension.Order()), strings.Compare(string(a.Dimension), string(b.Dimension)))
	})
	return out, nil
}

// ListUsageTenants implements store.UsageStore.
func (s *Store) ListUsageTenants(ctx context.Context, from, to time.Time) ([]string, error) {
	rows, err := s.usageQuery(ctx, `SELECT DISTINCT tenant_id FROM usage_hourly WHERE hour_ms >= $1 AND hour_ms < $2`,
		store.HourOf(from).UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("list usage tenants: %w", err)
	}
	out, err := usageStrings(rows)
	if err != nil {
		return nil, fmt.Errorf("list usage tenants: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// UsageTotals implements store.UsageStore. Each engine's SUM of bigint
// could overflow (SQLite's raises an error), so an amount is summed as its
// high and low 32 bits, each sum far from int64's bounds (2^31 × the hours),
// and put together here.
func (s *Store) UsageTotals(ctx context.Context, from, to time.Time) ([]store.UsageTotal, error) {
	rows, err := s.usageQuery(ctx, `SELECT tenant_id, dimension, CAST(SUM(amount / 4294967296) AS BIGINT), CAST(SUM(amount % 4294967296) AS BIGINT)
		FROM usage_hourly WHERE hour_ms >= $1 AND hour_ms < $2 GROUP BY tenant_id, dimension`, store.HourOf(from).UnixMilli(), to.UnixMilli())
	out, err := Collect(s.db, rows, err, func(r Scanner) (store.UsageTotal, error) {
		var (
			t      store.UsageTotal
			dim    string
			hi, lo int64
		)
		if err := r.Scan(&t.TenantID, &dim, &hi, &lo); err != nil {
			return store.UsageTotal{}, err
		}
		t.Dimension = store.UsageDimension(dim)
		t.Amount = new(big.Int).Lsh(big.NewInt(hi), 32)
		t.Amount.Add(t.Amount, big.NewInt(lo))
		return t, nil
	}, "usage totals")
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b store.UsageTotal) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), cmp.Compare(a.Dimension.Order(), b.Dimension.Order()),
			strings.Compare(string(a.Dimension), string(b.Dimension)))
	})
	return out, nil
}

func usageStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// PutQuotaReports implements store.UsageStore.
func (s *Store) PutQuotaReports(ctx context.Context, brokerID int32, at time.Time, reports []store.QuotaReport, applied []store.ObjectReservation) error {
	reports, err := store.CheckQuotaReports(brokerID, at, reports)
	if err != nil {
		return err
	}
	applied, err = store.CheckConfirmations(applied)
	if err != nil {
		return err
	}
	return s.usageInTx(ctx, "put quota reports", func(tx usageTx) error {
		if _, err := tx.exec(ctx, `DELETE FROM quota_reports WHERE broker_id = $1`, brokerID); err != nil {
			return fmt.Errorf("put quota reports: %w", err)
		}
		const cols = 8
		const chunk = 64
		for len(reports) > 0 {
			n := min(len(reports), chunk)
			var b strings.Builder
			b.WriteString(`INSERT INTO quota_reports (broker_id, tenant_id, at_ms, offered, admitted,
				hot_storage_bytes, groups, transactional_ids) VALUES `)
			args := make([]any, 0, n*cols)
			for i, r := range reports[:n] {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteByte('(')
				for c := range cols {
					if c > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "$%d", i*cols+c+1)
				}
				b.WriteByte(')')
				offered, err := json.Marshal(r.Offered)
				if err != nil {
					return fmt.Errorf("put quota reports: %w", err)
				}
				admitted, err := json.Marshal(r.Admitted)
				if err != nil {
					return fmt.Errorf("put quota reports: %w", err)
				}
				args = append(args, r.BrokerID, r.TenantID, r.At.UnixMilli(), string(offered), string(admitted),
					r.HotStorageBytes, r.Groups, r.TransactionalIDs)
			}
			if _, err := tx.exec(ctx, b.String(), args...); err != nil {
				return fmt.Errorf("put quota reports: %w", err)
			}
			reports = reports[n:]
		}
		return s.confirmReservations(ctx, tx, brokerID, applied)
	})
}

// ListQuotaReports implements store.UsageStore.
func (s *Store) ListQuotaReports(ctx context.Context, tenantIDs []string, since time.Time) ([]store.QuotaReport, error) {
	const sel = `SELECT broker_id, tenant_id, at_ms, offered, admitted, hot_storage_bytes, groups, transactional_ids
		FROM quota_reports WHERE at_ms >= $1`
	var out []store.QuotaReport
	read := func(query string, args ...any) error {
		rows, err := s.usageQuery(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.QuotaReport
			var atMs int64
			var offered, admitted string
			if err := rows.Scan(&r.BrokerID, &r.TenantID, &atMs, &offered, &admitted, &r.HotStorageBytes, &r.Groups, &r.TransactionalIDs); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(offered), &r.Offered); err != nil {
				return fmt.Errorf("decode offered rates: %w", err)
			}
			if err := json.Unmarshal([]byte(admitted), &r.Admitted); err != nil {
				return fmt.Errorf("decode admitted rates: %w", err)
			}
			r.At = usageTime(atMs)
			out = append(out, r)
		}
		return rows.Err()
	}
	sinceMs := since.UnixMilli()
	if len(tenantIDs) == 0 {
		if err := read(sel, sinceMs); err != nil {
			return nil, fmt.Errorf("list quota reports: %w", err)
		}
	} else {
		seen := map[string]bool{}
		var ids []string
		for _, id := range tenantIDs {
			if c, ok := store.CanonicalID(id); ok && !seen[c] {
				seen[c] = true
				ids = append(ids, c)
			}
		}
		if len(ids) == 0 {
			return nil, nil
		}
		if err := read(sel+` AND `+s.db.In("tenant_id", "$2"), sinceMs, s.db.Strings(ids)); err != nil {
			return nil, fmt.Errorf("list quota reports: %w", err)
		}
	}
	slices.SortFunc(out, func(a, b store.QuotaReport) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), cmp.Compare(a.BrokerID, b.BrokerID))
	})
	return out, nil
}

// ColdStorageBytes implements store.UsageStore.
func (s *Store) ColdStorageBytes(ctx context.Context) (map[string]int64, error) {
	out, err := s.perTenant(ctx, `SELECT CAST(tenant_id AS TEXT), CAST(SUM(size_bytes) AS BIGINT) FROM remote_segments
		WHERE state = 'copy_finished' AND tenant_id <> $1 GROUP BY tenant_id`, system.TenantID)
	if err != nil {
		return nil, fmt.Errorf("cold storage bytes: %w", err)
	}
	return out, nil
}

// PartitionCounts implements store.UsageStore.
func (s *Store) PartitionCounts(ctx context.Context) (map[string]int64, error) {
	out, err := s.perTenant(ctx, `SELECT CAST(t.tenant_id AS TEXT), COUNT(*) FROM partitions p JOIN topics t ON t.id = p.topic_id
		WHERE t.tenant_id <> $1 GROUP BY t.tenant_id`, system.TenantID)
	if err != nil {
		return nil, fmt.Errorf("partition counts: %w", err)
	}
	return out, nil
}

func (s *Store) perTenant(ctx context.Context, query string, args ...any) (map[string]int64, error) {
	rows, err := s.usageQuery(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
