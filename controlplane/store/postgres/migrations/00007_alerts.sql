-- Lag and retention-expiry alerts (DESIGN.md §8, issue 8): the sampled lag
-- history, the alerts raised from it, tenants' webhook endpoints and the
-- outbox of webhook deliveries.
--
-- lag_samples: one row per (tenant, group, topic, partition, sampled_at),
-- kept bounded by PruneLagSamples. The unique index serves the reads: one
-- key's history in a time window (a range scan, backwards for oldest first)
-- and the newest sample of each key. No foreign key to topics: samples of a
-- deleted topic (ids are never reused) are harmless and pruned with age.
--
-- alerts: at most one active (pending or firing) alert per (tenant, kind,
-- group, topic, partition), enforced by the partial unique index
-- alerts_active_key; resolved alerts are kept as history. details is json,
-- not jsonb: the evaluator's JSON is returned byte for byte.
--
-- webhooks: the signing secret is stored (HMAC needs it) and returned only
-- to the sender with a claimed delivery.
--
-- webhook_deliveries: the outbox. (webhook_id, alert_id, alert_state) is
-- unique, so one state change is enqueued once per webhook (test deliveries
-- have no alert; NULLs never collide). The composite foreign keys keep a
-- delivery in its webhook's and its alert's tenant, and deliveries go with
-- their webhook. lease_token / lease_expires_at mark a delivery being sent.
--
-- Group names sort bytewise (COLLATE "C"), as in SQLite. No trigger: none of
-- this is cluster metadata.

-- +goose Up
CREATE TABLE lag_samples (
    tenant_id        uuid        NOT NULL,
    group_name       text        COLLATE "C" NOT NULL,
    topic_id         uuid        NOT NULL,
    partition        integer     NOT NULL,
    sampled_at       timestamptz NOT NULL,
    topic_name       text        NOT NULL,
    offline          boolean     NOT NULL,
    committed_offset bigint      NOT NULL,
    log_start_offset bigint      NOT NULL,
    log_end_offset   bigint      NOT NULL,
    lag_messages     bigint      NOT NULL,
    lag_age_ms       bigint      NOT NULL,
    partition_bytes  bigint      NOT NULL,
    unconsumed_bytes bigint      NOT NULL,
    retention_ms     bigint      NOT NULL,
    retention_bytes  bigint      NOT NULL,
    CONSTRAINT lag_samples_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE,
    CONSTRAINT lag_samples_partition_check CHECK (partition >= 0),
    CONSTRAINT lag_samples_offsets_check
        CHECK (committed_offset >= -1 AND log_start_offset >= 0 AND log_end_offset >= log_start_offset)
);

CREATE UNIQUE INDEX lag_samples_key_time_idx ON lag_samples (tenant_id, group_name, topic_id, partition, sampled_at DESC);
CREATE INDEX lag_samples_sampled_at_idx ON lag_samples (sampled_at);

CREATE TABLE alerts (
    id          uuid        NOT NULL,
    tenant_id   uuid        NOT NULL,
    kind        text        NOT NULL,
    group_name  text        COLLATE "C" NOT NULL,
    topic_id    uuid        NOT NULL,
    topic_name  text        NOT NULL,
    partition   integer     NOT NULL,
    state       text        NOT NULL,
    details     json        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    fired_at    timestamptz,
    resolved_at timestamptz,
    clear_since timestamptz,
    CONSTRAINT alerts_pkey PRIMARY KEY (id),
    CONSTRAINT alerts_id_tenant_key UNIQUE (id, tenant_id),
    CONSTRAINT alerts_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE,
    CONSTRAINT alerts_kind_check CHECK (kind IN ('lag-growing', 'retention-expiry-risk', 'retention-expired')),
    CONSTRAINT alerts_state_check CHECK (state IN ('pending', 'firing', 'resolved')),
    CONSTRAINT alerts_resolved_check CHECK ((state = 'resolved') = (resolved_at IS NOT NULL)),
    CONSTRAINT alerts_partition_check CHECK (partition >= 0),
    CONSTRAINT alerts_details_check CHECK (json_typeof(details) = 'object')
);

CREATE UNIQUE INDEX alerts_active_key ON alerts (tenant_id, kind, group_name, topic_id, partition)
    WHERE state <> 'resolved';
CREATE INDEX alerts_tenant_created_idx ON alerts (tenant_id, created_at DESC, id DESC);

CREATE TABLE webhooks (
    id          uuid        NOT NULL,
    tenant_id   uuid        NOT NULL,
    url         text        NOT NULL,
    secret      bytea       NOT NULL,
    description text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT webhooks_pkey PRIMARY KEY (id),
    CONSTRAINT webhooks_id_tenant_key UNIQUE (id, tenant_id),
    CONSTRAINT webhooks_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE
);

CREATE INDEX webhooks_tenant_created_idx ON webhooks (tenant_id, created_at, id);

CREATE TABLE webhook_deliveries (
    id               uuid        NOT NULL,
    tenant_id        uuid        NOT NULL,
    webhook_id       uuid        NOT NULL,
    alert_id         uuid,
    alert_state      text        NOT NULL,
    payload          bytea       NOT NULL,
    status           text        NOT NULL,
    attempts         integer     NOT NULL,
    next_attempt_at  timestamptz NOT NULL,
    lease_token      uuid,
    lease_expires_at timestamptz,
    last_error       text        NOT NULL,
    created_at       timestamptz NOT NULL,
    delivered_at     timestamptz,
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id),
    CONSTRAINT webhook_deliveries_dedup_key UNIQUE (webhook_id, alert_id, alert_state),
    CONSTRAINT webhook_deliveries_webhook_fkey FOREIGN KEY (webhook_id, tenant_id)
        REFERENCES webhooks (id, tenant_id) ON DELETE CASCADE,
    CONSTRAINT webhook_deliveries_alert_fkey FOREIGN KEY (alert_id, tenant_id)
        REFERENCES alerts (id, tenant_id) ON DELETE CASCADE,
    CONSTRAINT webhook_deliveries_state_check
        CHECK (alert_state IN ('pending', 'firing', 'resolved', 'test') AND (alert_id IS NULL) = (alert_state = 'test')),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed')),
    CONSTRAINT webhook_deliveries_attempts_check CHECK (attempts >= 0)
);

CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook_created_idx ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_alert_idx ON webhook_deliveries (alert_id) WHERE alert_id IS NOT NULL;
CREATE INDEX webhook_deliveries_lease_token_idx ON webhook_deliveries (lease_token) WHERE lease_token IS NOT NULL;

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
DROP TABLE alerts;
DROP TABLE lag_samples;
