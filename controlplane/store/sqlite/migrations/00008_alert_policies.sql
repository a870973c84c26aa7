-- Tenants' alert policies (issue 8); see the Postgres migration of the same
-- number. Times are unix milliseconds.

-- +goose Up
CREATE TABLE alert_policies (
    tenant_id                TEXT    NOT NULL PRIMARY KEY REFERENCES tenants (id) ON DELETE CASCADE,
    expiry_risk_threshold_ms INTEGER NOT NULL CHECK (expiry_risk_threshold_ms BETWEEN 60000 AND 7776000000),
    updated_at               INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE alert_policies;
