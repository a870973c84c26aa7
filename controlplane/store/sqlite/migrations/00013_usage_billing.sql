-- Usage metering and billing (issue 17); see the Postgres migration of the
-- same number for the model. The columns are the same (INTEGER is 64-bit,
-- REAL a double). SQLite cannot alter a CHECK constraint, so
-- webhook_deliveries is rebuilt to admit 'invoice.finalized' events without
-- an alert (nothing references it; its rows are copied as they are).

-- +goose Up
CREATE TABLE usage_hourly (
    tenant_id TEXT    NOT NULL,
    hour_ms   INTEGER NOT NULL,
    dimension TEXT    NOT NULL,
    amount    INTEGER NOT NULL CHECK (amount >= 0),
    PRIMARY KEY (tenant_id, hour_ms, dimension)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_hourly_hour_idx ON usage_hourly (hour_ms, tenant_id);

CREATE TABLE usage_report_keys (
    broker_id    INTEGER NOT NULL,
    broker_epoch INTEGER NOT NULL,
    sequence     INTEGER NOT NULL,
    applied_at   INTEGER NOT NULL,
    PRIMARY KEY (broker_id, broker_epoch, sequence)
) STRICT, WITHOUT ROWID;

CREATE TABLE usage_ingress_cursors (
    topic_id     TEXT    NOT NULL,
    partition    INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    next_offset  INTEGER NOT NULL CHECK (next_offset >= 0),
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition)
) STRICT, WITHOUT ROWID;

CREATE TABLE usage_meters (
    name    TEXT    NOT NULL PRIMARY KEY,
    last_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE quota_reports (
    broker_id              INTEGER NOT NULL,
    tenant_id              TEXT    NOT NULL,
    at_ms                  INTEGER NOT NULL,
    offered_produce_bytes  REAL    NOT NULL,
    offered_fetch_bytes    REAL    NOT NULL,
    offered_requests       REAL    NOT NULL,
    offered_producer_ids   REAL    NOT NULL,
    admitted_produce_bytes REAL    NOT NULL,
    admitted_fetch_bytes   REAL    NOT NULL,
    admitted_requests      REAL    NOT NULL,
    admitted_producer_ids  REAL    NOT NULL,
    hot_storage_bytes      INTEGER NOT NULL,
    groups                 INTEGER NOT NULL,
    transactional_ids      INTEGER NOT NULL,
    PRIMARY KEY (broker_id, tenant_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX quota_reports_tenant_idx ON quota_reports (tenant_id, broker_id);

CREATE TABLE plan_prices (
    plan              TEXT    NOT NULL,
    dimension         TEXT    NOT NULL,
    currency          TEXT    NOT NULL,
    unit              TEXT    NOT NULL,
    unit_size         INTEGER NOT NULL,
    unit_price_micros INTEGER NOT NULL,
    free_quantity     INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (plan, dimension),
    CHECK (unit_size > 0 AND unit_price_micros >= 0 AND free_quantity >= 0)
) STRICT, WITHOUT ROWID;

CREATE TABLE invoices (
    id           TEXT    NOT NULL PRIMARY KEY,
    tenant_id    TEXT    NOT NULL,
    period       TEXT    NOT NULL,
    period_start INTEGER NOT NULL,
    period_end   INTEGER NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('draft', 'finalized')),
    plan         TEXT    NOT NULL,
    currency     TEXT    NOT NULL,
    lines        TEXT    NOT NULL,
    total_minor  INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    finalized_at INTEGER,
    UNIQUE (tenant_id, period),
    CHECK ((status = 'finalized') = (finalized_at IS NOT NULL))
) STRICT;
CREATE INDEX invoices_draft_end_idx ON invoices (period_end, tenant_id) WHERE status = 'draft';

CREATE TABLE webhook_deliveries_new (
    id               TEXT    NOT NULL PRIMARY KEY,
    tenant_id        TEXT    NOT NULL,
    webhook_id       TEXT    NOT NULL,
    alert_id         TEXT,
    alert_state      TEXT    NOT NULL CHECK (alert_state IN ('pending', 'firing', 'resolved', 'test', 'invoice.finalized')),
    payload          BLOB    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL CHECK (attempts >= 0),
    next_attempt_at  INTEGER NOT NULL,
    lease_token      TEXT,
    lease_expires_at INTEGER,
    last_error       TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    delivered_at     INTEGER,
    UNIQUE (webhook_id, alert_id, alert_state),
    FOREIGN KEY (webhook_id, tenant_id) REFERENCES webhooks (id, tenant_id) ON DELETE CASCADE,
    FOREIGN KEY (alert_id, tenant_id) REFERENCES alerts (id, tenant_id) ON DELETE CASCADE,
    CHECK ((alert_id IS NULL) = (alert_state IN ('test', 'invoice.finalized')))
) STRICT;
INSERT INTO webhook_deliveries_new SELECT * FROM webhook_deliveries;
DROP TABLE webhook_deliveries;
ALTER TABLE webhook_deliveries_new RENAME TO webhook_deliveries;
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook_created_idx ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_alert_idx ON webhook_deliveries (alert_id) WHERE alert_id IS NOT NULL;
CREATE INDEX webhook_deliveries_lease_token_idx ON webhook_deliveries (lease_token) WHERE lease_token IS NOT NULL;

-- +goose Down
CREATE TABLE webhook_deliveries_old (
    id               TEXT    NOT NULL PRIMARY KEY,
    tenant_id        TEXT    NOT NULL,
    webhook_id       TEXT    NOT NULL,
    alert_id         TEXT,
    alert_state      TEXT    NOT NULL CHECK (alert_state IN ('pending', 'firing', 'resolved', 'test')),
    payload          BLOB    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL CHECK (attempts >= 0),
    next_attempt_at  INTEGER NOT NULL,
    lease_token      TEXT,
    lease_expires_at INTEGER,
    last_error       TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    delivered_at     INTEGER,
    UNIQUE (webhook_id, alert_id, alert_state),
    FOREIGN KEY (webhook_id, tenant_id) REFERENCES webhooks (id, tenant_id) ON DELETE CASCADE,
    FOREIGN KEY (alert_id, tenant_id) REFERENCES alerts (id, tenant_id) ON DELETE CASCADE,
    CHECK ((alert_id IS NULL) = (alert_state = 'test'))
) STRICT;
INSERT INTO webhook_deliveries_old SELECT * FROM webhook_deliveries WHERE alert_state <> 'invoice.finalized';
DROP TABLE webhook_deliveries;
ALTER TABLE webhook_deliveries_old RENAME TO webhook_deliveries;
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook_created_idx ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_alert_idx ON webhook_deliveries (alert_id) WHERE alert_id IS NOT NULL;
CREATE INDEX webhook_deliveries_lease_token_idx ON webhook_deliveries (lease_token) WHERE lease_token IS NOT NULL;
DROP TABLE invoices;
DROP TABLE plan_prices;
DROP TABLE quota_reports;
DROP TABLE usage_meters;
DROP TABLE usage_ingress_cursors;
DROP TABLE usage_report_keys;
DROP TABLE usage_hourly;
