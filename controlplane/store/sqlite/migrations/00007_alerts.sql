-- Lag and retention-expiry alerts (DESIGN.md §8, issue 8); see the Postgres
-- migration of the same number for the model. Ids are UUID text, times unix
-- milliseconds, booleans 0/1, alert details JSON text, payloads and secrets
-- BLOBs. SQLite compares text bytewise, as the Postgres columns (COLLATE "C")
-- do, and supports the partial unique index that keeps one active alert per
-- key. lag_samples is clustered on its key and time (WITHOUT ROWID).

-- +goose Up
CREATE TABLE lag_samples (
    tenant_id        TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    group_name       TEXT    NOT NULL,
    topic_id         TEXT    NOT NULL,
    partition        INTEGER NOT NULL CHECK (partition >= 0),
    sampled_at       INTEGER NOT NULL,
    topic_name       TEXT    NOT NULL,
    offline          INTEGER NOT NULL CHECK (offline IN (0, 1)),
    committed_offset INTEGER NOT NULL CHECK (committed_offset >= -1),
    log_start_offset INTEGER NOT NULL CHECK (log_start_offset >= 0),
    log_end_offset   INTEGER NOT NULL,
    lag_messages     INTEGER NOT NULL,
    lag_age_ms       INTEGER NOT NULL,
    partition_bytes  INTEGER NOT NULL,
    unconsumed_bytes INTEGER NOT NULL,
    retention_ms     INTEGER NOT NULL,
    retention_bytes  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, group_name, topic_id, partition, sampled_at),
    CHECK (log_end_offset >= log_start_offset)
) STRICT, WITHOUT ROWID;

CREATE INDEX lag_samples_sampled_at_idx ON lag_samples (sampled_at);

CREATE TABLE alerts (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant_id   TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    kind        TEXT    NOT NULL CHECK (kind IN ('lag-growing', 'retention-expiry-risk', 'retention-expired')),
    group_name  TEXT    NOT NULL,
    topic_id    TEXT    NOT NULL,
    topic_name  TEXT    NOT NULL,
    partition   INTEGER NOT NULL CHECK (partition >= 0),
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'firing', 'resolved')),
    details     TEXT    NOT NULL CHECK (json_valid(details) AND json_type(details) = 'object'),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    fired_at    INTEGER,
    resolved_at INTEGER,
    clear_since INTEGER,
    UNIQUE (id, tenant_id),
    CHECK ((state = 'resolved') = (resolved_at IS NOT NULL))
) STRICT;

CREATE UNIQUE INDEX alerts_active_key ON alerts (tenant_id, kind, group_name, topic_id, partition)
    WHERE state <> 'resolved';
CREATE INDEX alerts_tenant_created_idx ON alerts (tenant_id, created_at DESC, id DESC);

CREATE TABLE webhooks (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant_id   TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url         TEXT    NOT NULL,
    secret      BLOB    NOT NULL,
    description TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (id, tenant_id)
) STRICT;

CREATE INDEX webhooks_tenant_created_idx ON webhooks (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
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

CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook_created_idx ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_alert_idx ON webhook_deliveries (alert_id) WHERE alert_id IS NOT NULL;
CREATE INDEX webhook_deliveries_lease_token_idx ON webhook_deliveries (lease_token) WHERE lease_token IS NOT NULL;

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP TABLE alerts;
DROP TABLE lag_samples;
