-- The brokers' suspension feed; see the Postgres migration of the same
-- number.

-- +goose Up
CREATE INDEX tenants_suspended_idx ON tenants (id) WHERE status = 'suspended';

-- +goose Down
DROP INDEX tenants_suspended_idx;
