package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Count reservations (store.UsageStore.ReserveObjects, and the
// confirmations PutQuotaReports applies), written once.
//
// A tenant's decisions are serialised by its tenant row's lock
// (lockTenant, as topic creation's). Row locks on object_reservations are
// taken in one order, (tenant, kind, name): ReserveObjects locks every
// pending row of its tenant in that order before it reads the reports, and
// then only inserts new names or changes rows it holds; PutQuotaReports
// locks the rows it confirms in that order before deleting them. So the
// two never deadlock, and a confirmation (a report that now counts a name,
// with the name's pending row gone) is either committed before a
// decision's reads, or waits for the decision to commit: a decision never
// sees the report without the row's deletion, or the deletion without the
// report.

// reservationRecord is a row of object_reservations, for Records.
type reservationRecord struct {
	TenantID  string `json:"tenant_id"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	BrokerID  int32  `json:"broker_id"`
	Token     int64  `json:"token"`
	ExpiresMs int64  `json:"expires_ms"`
}

var reservationColumns = []Column{
	{"tenant_id", "text"}, {"kind", "text"}, {"name", "text"},
	{"broker_id", "integer"}, {"token", "bigint"}, {"expires_ms", "bigint"},
}

// ReserveObjects implements store.UsageStore.
func (s *Store) ReserveObjects(ctx context.Context, r store.Reservations) ([]store.ReservationResult, error) {
	r, err := store.CheckReservations(r)
	if err != nil {
		return nil, err
	}
	atMs := r.At.UnixMilli()
	var out []store.ReservationResult
	err = s.usageInTx(ctx, "reserve objects", func(tx usageTx) error {
		if err := s.lockTenant(ctx, tx.tx, r.TenantID); err != nil {
			return err
		}
		// Every pending row of the tenant, locked in (kind, name) order.
		rows, err := tx.query(ctx, `SELECT kind, name, expires_ms FROM object_reservations WHERE tenant_id = $1
			ORDER BY kind, name`+s.db.Lock(LockUpdate), r.TenantID)
		if err != nil {
			return fmt.Errorf("reserve objects: %w", err)
		}
		pending := map[store.ObjectKind]map[string]bool{}
		expired := 0
		for rows.Next() {
			var kind, name string
			var expiresMs int64
			if err := rows.Scan(&kind, &name, &expiresMs); err != nil {
				rows.Close()
				return fmt.Errorf("reserve objects: %w", err)
			}
			if expiresMs <= atMs {
				expired++
				continue
			}
			k := store.ObjectKind(kind)
			if pending[k] == nil {
				pending[k] = map[string]bool{}
			}
			pending[k][name] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reserve objects: %w", err)
		}
		reported := map[store.ObjectKind]int64{}
		var groups, txnIDs int64
		if err := tx.row(ctx, `SELECT coalesce(sum(groups), 0), coalesce(sum(transactional_ids), 0) FROM quota_reports
			WHERE tenant_id = $1 AND at_ms > $2`, r.TenantID, r.ReportedAfter.UnixMilli()).Scan(&groups, &txnIDs); err != nil {
			return fmt.Errorf("reserve objects: %w", err)
		}
		reported[store.ObjectGroup], reported[store.ObjectTransactionalID] = groups, txnIDs
		out = store.DecideReservations(r.Limits, reported, pending, r.Objects)

		if expired > 0 {
			if _, err := tx.exec(ctx, `DELETE FROM object_reservations WHERE tenant_id = $1 AND expires_ms <= $2`, r.TenantID, atMs); err != nil {
				return fmt.Errorf("reserve objects: %w", err)
			}
		}
		// The grants, one row per name (the last grant's token), in
		// (kind, name) order.
		granted := map[[2]string]reservationRecord{}
		expires := r.At.Add(r.TTL).UnixMilli()
		for i, o := range r.Objects {
			if out[i].Granted {
				granted[[2]string{string(o.Kind), o.Name}] = reservationRecord{
					TenantID: r.TenantID, Kind: string(o.Kind), Name: o.Name, BrokerID: r.BrokerID, Token: o.Token, ExpiresMs: expires,
				}
			}
		}
		if len(granted) == 0 {
			return nil
		}
		recs := make([]reservationRecord, 0, len(granted))
		for _, rec := range granted {
			recs = append(recs, rec)
		}
		slices.SortFunc(recs, func(a, b reservationRecord) int {
			return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Name, b.Name))
		})
		js, err := Records(recs)
		if err != nil {
			return err
		}
		// WHERE true: SQLite's parser needs it before ON CONFLICT in an
		// INSERT … SELECT.
		if _, err := tx.exec(ctx, `INSERT INTO object_reservations (tenant_id, kind, name, broker_id, token, expires_ms)
			SELECT r.tenant_id, r.kind, r.name, r.broker_id, r.token, r.expires_ms FROM `+s.db.Records("$1", "r", reservationColumns...)+`
			WHERE true
			ON CONFLICT (tenant_id, kind, name) DO UPDATE SET broker_id = excluded.broker_id, token = excluded.token, expires_ms = excluded.expires_ms`,
			js); err != nil {
			return fmt.Errorf("reserve objects: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// confirmReservations ends, in tx, the reservations of brokerID that
// applied confirms (the rows with their token), locking them in (tenant,
// kind, name) order first.
func (s *Store) confirmReservations(ctx context.Context, tx usageTx, brokerID int32, applied []store.ObjectReservation) error {
	if len(applied) == 0 {
		return nil
	}
	recs := make([]reservationRecord, len(applied))
	for i, o := range applied {
		recs[i] = reservationRecord{TenantID: o.TenantID, Kind: string(o.Kind), Name: o.Name, BrokerID: brokerID, Token: o.Token}
	}
	js, err := Records(recs)
	if err != nil {
		return err
	}
	match := `broker_id = $1 AND EXISTS (SELECT 1 FROM ` + s.db.Records("$2", "r", reservationColumns...) + `
		WHERE r.tenant_id = object_reservations.tenant_id AND r.kind = object_reservations.kind
		AND r.name = object_reservations.name AND r.token = object_reservations.token)`
	rows, err := tx.query(ctx, `SELECT tenant_id FROM object_reservations WHERE `+match+`
		ORDER BY tenant_id, kind, name`+s.db.Lock(LockUpdate), brokerID, js)
	if err != nil {
		return fmt.Errorf("confirm reservations: %w", err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("confirm reservations: %w", err)
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.exec(ctx, `DELETE FROM object_reservations WHERE `+match, brokerID, js); err != nil {
		return fmt.Errorf("confirm reservations: %w", err)
	}
	return nil
}
