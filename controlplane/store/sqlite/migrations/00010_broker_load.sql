-- The broker load kept as counters, one row per broker (see the Postgres
-- migration of the same number for the model).
--
-- SQLite triggers are row-level: each partition row written adds or
-- subtracts its own replicas and leader on the rows of its brokers (at
-- most replication factor + 1 of them). Rows of zeros are inserted first
-- for brokers without one, then updated, so that the CHECKs see sums, not
-- deltas: a count never goes below zero. An update fires only when the
-- replica list or the leader changes (not for an ISR change). There is one
-- writer, so the counts need no locking of their own. Rows are never
-- deleted; PartitionLoad leaves out brokers that hold nothing.

-- +goose Up
CREATE TABLE broker_load (
    broker   INTEGER NOT NULL PRIMARY KEY,
    replicas INTEGER NOT NULL CHECK (replicas >= 0),
    leaders  INTEGER NOT NULL CHECK (leaders >= 0)
) STRICT;

INSERT INTO broker_load (broker, replicas, leaders)
SELECT broker, sum(replica), sum(leader) FROM (
    SELECT CAST(r.value AS INTEGER) AS broker, 1 AS replica, 0 AS leader
    FROM partitions p, json_each(p.replicas) r
    UNION ALL
    SELECT leader, 0, 1 FROM partitions WHERE leader >= 0
) GROUP BY broker;

-- +goose StatementBegin
CREATE TRIGGER partitions_load_insert AFTER INSERT ON partitions
BEGIN
    INSERT INTO broker_load (broker, replicas, leaders)
    SELECT broker, 0, 0 FROM (
        SELECT CAST(value AS INTEGER) AS broker FROM json_each(NEW.replicas)
        UNION SELECT NEW.leader WHERE NEW.leader >= 0
    ) WHERE true
    ON CONFLICT (broker) DO NOTHING;
    UPDATE broker_load SET
        replicas = replicas + (SELECT count(*) FROM json_each(NEW.replicas) WHERE CAST(value AS INTEGER) = broker_load.broker),
        leaders = leaders + (broker = NEW.leader)
    WHERE broker IN (SELECT CAST(value AS INTEGER) FROM json_each(NEW.replicas)) OR broker = NEW.leader;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER partitions_load_delete AFTER DELETE ON partitions
BEGIN
    INSERT INTO broker_load (broker, replicas, leaders)
    SELECT broker, 0, 0 FROM (
        SELECT CAST(value AS INTEGER) AS broker FROM json_each(OLD.replicas)
        UNION SELECT OLD.leader WHERE OLD.leader >= 0
    ) WHERE true
    ON CONFLICT (broker) DO NOTHING;
    UPDATE broker_load SET
        replicas = replicas - (SELECT count(*) FROM json_each(OLD.replicas) WHERE CAST(value AS INTEGER) = broker_load.broker),
        leaders = leaders - (broker = OLD.leader)
    WHERE broker IN (SELECT CAST(value AS INTEGER) FROM json_each(OLD.replicas)) OR broker = OLD.leader;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER partitions_load_update AFTER UPDATE OF replicas, leader ON partitions
WHEN OLD.replicas IS NOT NEW.replicas OR OLD.leader IS NOT NEW.leader
BEGIN
    INSERT INTO broker_load (broker, replicas, leaders)
    SELECT broker, 0, 0 FROM (
        SELECT CAST(value AS INTEGER) AS broker FROM json_each(NEW.replicas)
        UNION SELECT NEW.leader WHERE NEW.leader >= 0
        UNION SELECT CAST(value AS INTEGER) AS broker FROM json_each(OLD.replicas)
        UNION SELECT OLD.leader WHERE OLD.leader >= 0
    ) WHERE true
    ON CONFLICT (broker) DO NOTHING;
    UPDATE broker_load SET
        replicas = replicas + (SELECT count(*) FROM json_each(NEW.replicas) WHERE CAST(value AS INTEGER) = broker_load.broker) - (SELECT count(*) FROM json_each(OLD.replicas) WHERE CAST(value AS INTEGER) = broker_load.broker),
        leaders = leaders + (broker = NEW.leader) - (broker = OLD.leader)
    WHERE broker IN (SELECT CAST(value AS INTEGER) FROM json_each(NEW.replicas)) OR broker = NEW.leader
       OR broker IN (SELECT CAST(value AS INTEGER) FROM json_each(OLD.replicas)) OR broker = OLD.leader;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER partitions_load_update;
DROP TRIGGER partitions_load_delete;
DROP TRIGGER partitions_load_insert;
DROP TABLE broker_load;
