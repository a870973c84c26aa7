package sqlstore

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants/system"
)

const tenantColumns = `id, name, email, plan, status, overrides, created_at`

func scanTenant(r Scanner) (store.Tenant, error) {
	var t store.Tenant
	if err := r.Scan(&t.ID, &t.Name, &t.Email, &t.Plan, &t.Status, &t.Overrides, ScanTime(&t.CreatedAt)); err != nil {
		return store.Tenant{}, err
	}
	return t, nil
}

// CreateTenant implements store.Store. firstKey.TenantID is set to t.ID.
// A zero CreatedAt (tenant or key) is stored as now.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant, firstKey store.APIKey) error {
	id, err := store.CheckNewID("tenant", t.ID)
	if err != nil {
		return err
	}
	if err := store.CheckTenantStatus(t.Status); err != nil {
		return err
	}
	overrides, err := store.OverridesJSON(t.Overrides)
	if err != nil {
		return err
	}
	firstKey.TenantID = id
	err = s.db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO tenants (`+tenantColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			id, t.Name, t.Email, t.Plan, t.Status, overrides, s.db.Time(orNow(t.CreatedAt))); err != nil {
			return err
		}
		return s.insertAPIKey(ctx, tx, firstKey)
	})
	return s.db.Translate("create tenant", err)
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Tenant{}, store.ErrNotFound
	}
	t, err := scanTenant(s.db.Read().QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
	return t, s.db.Translate("get tenant", err)
}

// GetTenantByName implements store.Store.
func (s *Store) GetTenantByName(ctx context.Context, name string) (store.Tenant, error) {
	t, err := scanTenant(s.db.Read().QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = $1`, name))
	return t, s.db.Translate("get tenant by name", err)
}

// ListTenants implements store.Store. Creation order is (CreatedAt, ID);
// an unknown afterID → store.ErrNotFound; limit <= 0 means no limit.
func (s *Store) ListTenants(ctx context.Context, afterID string, limit int) ([]store.Tenant, error) {
	q := `SELECT ` + tenantColumns + ` FROM tenants WHERE id <> '` + system.TenantID + `'`
	var args []any
	if afterID != "" {
		id, ok := store.CanonicalID(afterID)
		if !ok {
			return nil, store.ErrNotFound
		}
		var exists bool
		if err := s.db.Read().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, id).Scan(&exists); err != nil {
			return nil, s.db.Translate("list tenants", err)
		}
		if !exists {
			return nil, store.ErrNotFound
		}
		q += ` AND (created_at, id) > (SELECT created_at, id FROM tenants WHERE id = $1)`
		args = append(args, id)
	}
	q += ` ORDER BY created_at, id`
	if limit > 0 {
		args = append(args, limit)
		q += ` LIMIT $` + strconv.Itoa(len(args))
	}
	rows, err := s.db.Read().QueryContext(ctx, q, args...)
	return Collect(s.db, rows, err, scanTenant, "list tenants")
}

// UpdateTenant implements store.Store: the row is locked (FOR NO KEY UPDATE
// on Postgres; SQLite's write transaction holds the database) while update
// runs, so concurrent updates serialise. nil overrides are stored as "{}".
func (s *Store) UpdateTenant(ctx context.Context, id string, update func(store.Tenant) (store.Tenant, error)) (store.Tenant, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Tenant{}, store.ErrNotFound
	}
	var out store.Tenant
	var updateErr error
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		cur, err := scanTenant(tx.QueryRowContext(ctx,
			`SELECT `+tenantColumns+` FROM tenants WHERE id = $1`+s.db.Lock(LockNoKeyUpdate), id))
		if err != nil {
			return err
		}
		next, err := update(cur)
		if err != nil {
			updateErr = err
			return err
		}
		if err := store.CheckTenantStatus(next.Status); err != nil {
			return err
		}
		o, err := store.OverridesJSON(next.Overrides)
		if err != nil {
			return err
		}
		out, err = scanTenant(tx.QueryRowContext(ctx,
			`UPDATE tenants SET plan = $1, status = $2, overrides = $3 WHERE id = $4 RETURNING `+tenantColumns,
			next.Plan, next.Status, o, id))
		return err
	})
	if updateErr != nil {
		return store.Tenant{}, updateErr
	}
	return out, s.db.Translate("update tenant", err)
}

// ListSuspendedTenants implements store.Store. A partial index holds just
// the suspended tenants, so the brokers' feed never scans every tenant.
func (s *Store) ListSuspendedTenants(ctx context.Context) ([]string, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT id FROM tenants WHERE status = 'suspended' ORDER BY id`)
	return Collect(s.db, rows, err, scanString, "list suspended tenants")
}

// TenantUsage implements store.Store. An unknown tenant → store.ErrNotFound.
func (s *Store) TenantUsage(ctx context.Context, tenantID string) (store.TenantUsage, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.TenantUsage{}, store.ErrNotFound
	}
	var u store.TenantUsage
	err := s.db.Read().QueryRowContext(ctx,
		`SELECT (SELECT count(*) FROM topics WHERE tenant_id = t.id),
		        (SELECT coalesce(sum(partitions), 0) FROM topics WHERE tenant_id = t.id)
		 FROM tenants t WHERE t.id = $1`, id).Scan(&u.Topics, &u.Partitions)
	return u, s.db.Translate("tenant usage", err)
}

// scanString scans a one-column row of text.
func scanString(r Scanner) (string, error) {
	var v string
	return v, r.Scan(&v)
}
