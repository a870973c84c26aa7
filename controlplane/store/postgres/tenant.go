package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/controlplane/store"
)

const tenantColumns = `id, name, email, plan, status, overrides, created_at`

func scanTenant(r pgx.Row) (store.Tenant, error) {
	var t store.Tenant
	if err := r.Scan(&t.ID, &t.Name, &t.Email, &t.Plan, &t.Status, &t.Overrides, &t.CreatedAt); err != nil {
		return store.Tenant{}, err
	}
	t.CreatedAt = t.CreatedAt.UTC()
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
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx,
			`INSERT INTO tenants (`+tenantColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			id, t.Name, t.Email, t.Plan, t.Status, overrides, ts(orNow(t.CreatedAt))); err != nil {
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
	t, err := scanTenant(s.pool.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, id))
	return t, translate("get tenant", err)
}

// GetTenantByName implements store.Store.
func (s *Store) GetTenantByName(ctx context.Context, name string) (store.Tenant, error) {
	t, err := scanTenant(s.pool.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = $1`, name))
	return t, translate("get tenant by name", err)
}

// ListTenants implements store.Store. Creation order is (CreatedAt, ID);
// an unknown afterID → store.ErrNotFound; limit <= 0 means no limit.
func (s *Store) ListTenants(ctx context.Context, afterID string, limit int) ([]store.Tenant, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	var (
		rows pgx.Rows
		err  error
	)
	if afterID == "" {
		rows, err = s.pool.Query(ctx,
			`SELECT `+tenantColumns+` FROM tenants WHERE id <> '`+store.SystemTenantID+`' ORDER BY created_at, id LIMIT $1`, lim)
	} else {
		id, ok := store.CanonicalID(afterID)
		if !ok {
			return nil, store.ErrNotFound
		}
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, id).Scan(&exists); err != nil {
			return nil, translate("list tenants", err)
		}
		if !exists {
			return nil, store.ErrNotFound
		}
		rows, err = s.pool.Query(ctx,
			`SELECT `+tenantColumns+` FROM tenants
			 WHERE (created_at, id) > (SELECT created_at, id FROM tenants WHERE id = $1) AND id <> '`+store.SystemTenantID+`'
			 ORDER BY created_at, id LIMIT $2`, id, lim)
	}
	if err != nil {
		return nil, translate("list tenants", err)
	}
	return collect(rows, scanTenant, "list tenants")
}

// UpdateTenant implements store.Store: the row is locked (FOR NO KEY
// UPDATE) while update runs, so concurrent updates serialise. nil
// overrides are stored as "{}".
func (s *Store) UpdateTenant(ctx context.Context, id string, update func(store.Tenant) (store.Tenant, error)) (store.Tenant, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Tenant{}, store.ErrNotFound
	}
	var out store.Tenant
	var updateErr error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := scanTenant(tx.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1 FOR NO KEY UPDATE`, id))
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
		out, err = scanTenant(tx.QueryRow(ctx,
			`UPDATE tenants SET plan = $1, status = $2, overrides = $3 WHERE id = $4 RETURNING `+tenantColumns,
			next.Plan, next.Status, o, id))
		return err
	})
	if updateErr != nil {
		return store.Tenant{}, updateErr
	}
	return out, translate("update tenant", err)
}

// ListSuspendedTenants implements store.Store. A partial index holds just
// the suspended tenants, so the brokers' feed never scans every tenant.
func (s *Store) ListSuspendedTenants(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM tenants WHERE status = 'suspended' ORDER BY id`)
	if err != nil {
		return nil, translate("list suspended tenants", err)
	}
	return collect(rows, func(r pgx.Row) (string, error) {
		var id string
		err := r.Scan(&id)
		return id, err
	}, "list suspended tenants")
}

// TenantUsage implements store.Store. An unknown tenant → store.ErrNotFound.
func (s *Store) TenantUsage(ctx context.Context, tenantID string) (store.TenantUsage, error) {
	id, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.TenantUsage{}, store.ErrNotFound
	}
	var u store.TenantUsage
	err := s.pool.QueryRow(ctx,
		`SELECT (SELECT count(*) FROM topics WHERE tenant_id = t.id),
		        (SELECT coalesce(sum(partitions), 0) FROM topics WHERE tenant_id = t.id)
		 FROM tenants t WHERE t.id = $1`, id).Scan(&u.Topics, &u.Partitions)
	return u, translate("tenant usage", err)
}

// collect scans all rows with scan.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (T, error), op string) ([]T, error) {
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
