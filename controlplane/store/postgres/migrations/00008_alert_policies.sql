-- Tenants' alert policies (issue 8): the retention-expiry-risk threshold a
-- tenant chose. A tenant without a row has the control plane's default
-- (24 h). The bounds are store.MinExpiryRiskThreshold and
-- store.MaxExpiryRiskThreshold (1 minute to 90 days), in milliseconds.

-- +goose Up
CREATE TABLE alert_policies (
    tenant_id                uuid        NOT NULL,
    expiry_risk_threshold_ms bigint      NOT NULL,
    updated_at               timestamptz NOT NULL,
    CONSTRAINT alert_policies_pkey PRIMARY KEY (tenant_id),
    CONSTRAINT alert_policies_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE,
    CONSTRAINT alert_policies_threshold_check CHECK (expiry_risk_threshold_ms BETWEEN 60000 AND 7776000000)
);

-- +goose Down
DROP TABLE alert_policies;
