-- Count reservations (issue 29; controlplane/store/reservation.go): the
-- names of new groups and transactional ids a broker's coordinator reserved
-- (ReserveObjects) and has not yet confirmed in a quota report, so that a
-- tenant's count is its reported holdings plus these. One row per (tenant,
-- kind, name): the broker and token of its latest grant, and when it
-- expires unconfirmed (unix milliseconds).

-- +goose Up
CREATE TABLE object_reservations (
    tenant_id  TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('group', 'transactional_id')),
    name       TEXT    NOT NULL,
    broker_id  INTEGER NOT NULL,
    token      INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, kind, name)
) STRICT, WITHOUT ROWID;
CREATE INDEX object_reservations_broker_idx ON object_reservations (broker_id, expires_ms);

-- +goose Down
DROP TABLE object_reservations;
