package sqlite

import (
	"context"
	"database/sql"

	"github.com/sluicemq/sluice/controlplane/store"
)

const tenantColumns = `id, name, email, plan, status, overrides, created_at`

func scanTenant(r rowScanner) (store.Tenant, error) {
	var (
		t         store.Tenant
		overrides string
		created   int64
	)
	if err := r.Scan(&t.ID, &t.Name, &t.Email, &t.Plan, &t.Status, &overrides, &created); err != nil {
		return store.Tenant{}, err
	}
	t.Overrides = []byte(overrides)
	t.CreatedAt = fromMS(created)
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
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO tenants (`+tenantColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			id, t.Name, t.Email, t.Plan, t.Status, overrides, toMS(orNow(t.CreatedAt))); err != nil {
			return err
		}
		return insertAPIKey(ctx, tx, firstKey)
	})
	return translate("create tenant", err)
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Tenant{}, store.ErrNotFound
	}
	t, err := scanTenant(s.read.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id))
	return t, translate("get tenant", err)
}

// GetTenantByName implements store.Store.
func (s *Store) GetTenantByName(ctx context.Context, name string) (store.Tenant, error) {
	t, err := scanTenant(s.read.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = ?`, name))
	return t, translate("get tenant by name", err)
}

// ListTenants implements store.Store. Creation order is (CreatedAt, ID);
// an unknown afterID → store.ErrNotFound; limit <= 0 means no limit.
func (s *Store) ListTenants(ctx context.Context, afterID string, limit int) ([]store.Tenant, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	var (
		rows *sql.Rows
		err  error
	)
	if afterID == "" {
		rows, err = s.read.QueryContext(ctx,
			`SELECT `+tenantColumns+` FROM tenants WHERE id <> '`+store.SystemTenantID+`' ORDER BY created_at, id LIMIT ?`, limit)
	} else {
		id, ok := store.CanonicalID(afterID)
		if !ok {
			return nil, store.ErrNotFound
		}
		var created int64
		if err := s.read.QueryRowContext(ctx, `SELECT created_at FROM tenants WHERE id = ?`, id).Scan(&created); err != nil {
			return nil, translate("list tenants", err)
		}
		rows, err = s.read.QueryContext(ctx,
			`SELECT `+tenantColumns+` FROM tenants
			 WHERE (created_at > ?1 OR (created_at = ?1 AND id > ?2)) AND id <> '`+store.SystemTenantID+`'
			 ORDER BY created_at, id LIMIT ?3`, created, id, limit)
	}
	if err != nil {
		return nil, translate("list tenants", err)
	}
	return collect(rows, scanTenant, "list tenants")
}

// UpdateTenant implements store.Store: the write transaction (BEGIN
// IMMEDIATE) holds the database's write lock while update runs, so
// concurrent updates serialise. nil overrides are stored as "{}".
func (s *Store) UpdateTenant(ctx context.Context, id string, update func(store.Tenant) (store.Tenant, error)) (store.Tenant, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Tenant{}, store.ErrNotFound
	}
	var out store.Tenant
	var updateErr error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		cur, err := scanTenant(tx.QueryRowContext(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = ?`, id))
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
			`UPDATE tenants SET plan = ?, status = ?, overrides = ? WHERE id = ? RETURNING `+tenantColumns,
			next.Plan, next.Status, o, id))
		return err
	})
	if updateErr != nil {
		return store.Tenant{}, updateErr
	}
	return out, translate("update tenant", err)
}

// ListSuspendedTenants implements store.Store, from a partial index of
// the suspended tenants.
func (s *Store) ListSuspendedTenants(ctx context.Context) ([]string, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id FROM tenants WHERE status = 'suspended' ORDER BY id`)
	if err != nil {
		return nil, translate("list suspended tenants", err)
	}
	return collect(rows, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, "list suspended tenants")
}

// TenantUsage implements store.Store. An unknown tenant → store.ErrNotFound.
func (s *Store) TenantUsage(ctx context.Context, tenantID string) (store.TenantUsage, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.TenantUsage{}, store.ErrNotFound
	}
	var u store.TenantUsage
	err := s.read.QueryRowContext(ctx,
		`SELECT (SELECT count(*) FROM topics WHERE tenant_id = t.id),
		        (SELECT coalesce(sum(partitions), 0) FROM topics WHERE tenant_id = t.id)
		 FROM tenants t WHERE t.id = ?`, id).Scan(&u.Topics, &u.Partitions)
	return u, translate("tenant usage", err)
}

// collect scans all rows with scan.
func collect[T any](rows *sql.Rows, scan func(rowScanner) (T, error), op string) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, translate(op, err)
		}
		out = append(out, v)
	}
	return out, translate(op, rows.Err())
}
