-- The brokers' suspension feed (ListSuspendedTenants, polled by every
-- broker every few seconds) reads only the suspended tenants: a partial
-- index keeps that read proportional to them, not to every tenant.

-- +goose Up
CREATE INDEX tenants_suspended_idx ON tenants (id) WHERE status = 'suspended';

-- +goose Down
DROP INDEX tenants_suspended_idx;
