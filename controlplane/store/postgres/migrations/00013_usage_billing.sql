-- Usage metering and billing (issue 17; controlplane/store/usage.go and
-- billing.go). Written once for both drivers (controlplane/store/sqlstore),
-- so the new tables use the types both dialects share: ids as text, times
-- as bigint unix milliseconds, and no foreign key to the uuid-typed tables
-- (text cannot reference uuid; tenants are never deleted, and a cursor of a
-- deleted topic is dropped when a report names it).
--
-- usage_hourly: one row per (tenant, hour, dimension), amounts added in
-- place; hour_ms is the hour's start.
--
-- usage_report_keys: the (broker, broker epoch, sequence) of every applied
-- usage report still in the window (usage.go UsageReportWindow); inserting
-- the key is what makes a report apply once.
--
-- usage_ingress_cursors: per partition, the next offset ingress metering
-- expects and the newest leader epoch that named it; applied ranges move it
-- by compare-and-set.
--
-- usage_meters: per control-plane meter, the end of the last interval it
-- counted (compare-and-set).
--
-- quota_reports: each broker's latest ExchangeQuotas entry per tenant.
--
-- plan_prices: the prices operators set (billing/ holds the defaults).
--
-- invoices: one per (tenant, period); lines are the JSON the billing code
-- wrote, kept byte for byte; a finalized row is never updated.
--
-- webhook_deliveries may now carry an event without an alert:
-- 'invoice.finalized', enqueued by FinalizeInvoice.

-- +goose Up
CREATE TABLE usage_hourly (
    tenant_id text   NOT NULL,
    hour_ms   bigint NOT NULL,
    dimension text   NOT NULL,
    amount    bigint NOT NULL,
    CONSTRAINT usage_hourly_pkey PRIMARY KEY (tenant_id, hour_ms, dimension),
    CONSTRAINT usage_hourly_amount_check CHECK (amount >= 0)
);
CREATE INDEX usage_hourly_hour_idx ON usage_hourly (hour_ms, tenant_id);

CREATE TABLE usage_report_keys (
    broker_id    integer NOT NULL,
    broker_epoch bigint  NOT NULL,
    sequence     bigint  NOT NULL,
    applied_at   bigint  NOT NULL,
    CONSTRAINT usage_report_keys_pkey PRIMARY KEY (broker_id, broker_epoch, sequence)
);

CREATE TABLE usage_ingress_cursors (
    topic_id     text    NOT NULL,
    partition    integer NOT NULL,
    leader_epoch integer NOT NULL,
    next_offset  bigint  NOT NULL,
    updated_at   bigint  NOT NULL,
    CONSTRAINT usage_ingress_cursors_pkey PRIMARY KEY (topic_id, partition),
    CONSTRAINT usage_ingress_cursors_offset_check CHECK (next_offset >= 0)
);

CREATE TABLE usage_meters (
    name    text   NOT NULL,
    last_ms bigint NOT NULL,
    CONSTRAINT usage_meters_pkey PRIMARY KEY (name)
);

CREATE TABLE quota_reports (
    broker_id                   integer          NOT NULL,
    tenant_id                   text             NOT NULL,
    at_ms                       bigint           NOT NULL,
    offered_produce_bytes       double precision NOT NULL,
    offered_fetch_bytes         double precision NOT NULL,
    offered_requests            double precision NOT NULL,
    offered_producer_ids        double precision NOT NULL,
    admitted_produce_bytes      double precision NOT NULL,
    admitted_fetch_bytes        double precision NOT NULL,
    admitted_requests           double precision NOT NULL,
    admitted_producer_ids       double precision NOT NULL,
    hot_storage_bytes           bigint           NOT NULL,
    groups                      integer          NOT NULL,
    transactional_ids           integer          NOT NULL,
    CONSTRAINT quota_reports_pkey PRIMARY KEY (broker_id, tenant_id)
);
CREATE INDEX quota_reports_tenant_idx ON quota_reports (tenant_id, broker_id);

CREATE TABLE plan_prices (
    plan              text   NOT NULL,
    dimension         text   NOT NULL,
    currency          text   NOT NULL,
    unit              text   NOT NULL,
    unit_size         bigint NOT NULL,
    unit_price_micros bigint NOT NULL,
    free_quantity     bigint NOT NULL,
    updated_at        bigint NOT NULL,
    CONSTRAINT plan_prices_pkey PRIMARY KEY (plan, dimension),
    CONSTRAINT plan_prices_check CHECK (unit_size > 0 AND unit_price_micros >= 0 AND free_quantity >= 0)
);

CREATE TABLE invoices (
    id           text   NOT NULL,
    tenant_id    text   NOT NULL,
    period       text   NOT NULL,
    period_start bigint NOT NULL,
    period_end   bigint NOT NULL,
    status       text   NOT NULL,
    plan         text   NOT NULL,
    currency     text   NOT NULL,
    lines        text   NOT NULL,
    total_minor  bigint NOT NULL,
    updated_at   bigint NOT NULL,
    finalized_at bigint,
    CONSTRAINT invoices_pkey PRIMARY KEY (id),
    CONSTRAINT invoices_tenant_period_key UNIQUE (tenant_id, period),
    CONSTRAINT invoices_status_check CHECK (status IN ('draft', 'finalized')),
    CONSTRAINT invoices_finalized_check CHECK ((status = 'finalized') = (finalized_at IS NOT NULL))
);
CREATE INDEX invoices_draft_end_idx ON invoices (period_end, tenant_id) WHERE status = 'draft';

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_state_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_state_check
    CHECK ((alert_id IS NOT NULL AND alert_state IN ('pending', 'firing', 'resolved'))
        OR (alert_id IS NULL AND alert_state IN ('test', 'invoice.finalized')));

-- +goose Down
DELETE FROM webhook_deliveries WHERE alert_state = 'invoice.finalized';
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_state_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_state_check
    CHECK (alert_state IN ('pending', 'firing', 'resolved', 'test') AND (alert_id IS NULL) = (alert_state = 'test'));
DROP TABLE invoices;
DROP TABLE plan_prices;
DROP TABLE quota_reports;
DROP TABLE usage_meters;
DROP TABLE usage_ingress_cursors;
DROP TABLE usage_report_keys;
DROP TABLE usage_hourly;
