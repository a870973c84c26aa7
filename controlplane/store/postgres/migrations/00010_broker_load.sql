-- The broker load: per broker, the replicas and the leaders it holds over
-- all partitions (store.PartitionLoad), which placement reads on every
-- CreateTopic and CreatePartitions. It is kept as counters, one row per
-- broker, instead of being counted from every partition on each read.
--
-- Triggers maintain it, as they do the metadata version, so that no write
-- path can forget it (creation, growth, deletion by cascade, elections,
-- reassignments, migrations) and each change commits with the partition
-- rows it counts. They are statement-level with transition tables: one
-- row write per broker whose counts a statement changes (a COPY of many
-- partitions included), none for a statement that changes no replica list
-- or leader (ISR changes, a lost compare-and-set).
--
-- Concurrent writers: each count moves by an UPDATE of the broker's row (an
-- INSERT … ON CONFLICT DO UPDATE for a broker without one), which adds to
-- the committed row, so no count is lost at READ COMMITTED. Each statement
-- that writes partitions has already locked the metadata_version row when
-- these triggers run (its bump is a row trigger on UPDATE, and row triggers
-- fire before statement triggers; on INSERT and DELETE it is a statement
-- trigger named before these), so partition writers hold broker_load rows
-- one transaction at a time; the rows are written in broker order all the
-- same. A count never goes below zero (CHECK): a trigger that would make
-- one negative fails its statement loudly instead of storing a wrong load.
--
-- Rows are never deleted: a broker that holds nothing keeps a row of zeros,
-- which PartitionLoad leaves out.

-- +goose Up
CREATE TABLE broker_load (
    broker   integer NOT NULL,
    replicas integer NOT NULL,
    leaders  integer NOT NULL,
    CONSTRAINT broker_load_pkey PRIMARY KEY (broker),
    CONSTRAINT broker_load_replicas_check CHECK (replicas >= 0),
    CONSTRAINT broker_load_leaders_check CHECK (leaders >= 0)
);

INSERT INTO broker_load (broker, replicas, leaders)
SELECT broker, sum(replica), sum(leader) FROM (
    SELECT unnest(replicas) AS broker, 1 AS replica, 0 AS leader FROM partitions
    UNION ALL
    SELECT leader, 0, 1 FROM partitions WHERE leader >= 0
) AS load GROUP BY broker;

-- broker_load_add adds r replicas and l leaders (either may be negative) to
-- broker b's counts: an UPDATE of its row, or an insert when it has none
-- (ON CONFLICT: another transaction may insert it first). The row is
-- updated, not upserted, so that the CHECKs see the sum rather than the
-- delta.
-- +goose StatementBegin
CREATE FUNCTION broker_load_add(b integer, r integer, l integer) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE broker_load SET replicas = replicas + r, leaders = leaders + l WHERE broker = b;
    IF NOT FOUND THEN
        INSERT INTO broker_load AS bl (broker, replicas, leaders) VALUES (b, r, l)
        ON CONFLICT (broker) DO UPDATE SET replicas = bl.replicas + excluded.replicas, leaders = bl.leaders + excluded.leaders;
    END IF;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION broker_load_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT broker, sum(replica)::integer AS replicas, sum(leader)::integer AS leaders FROM (
            SELECT unnest(replicas) AS broker, 1 AS replica, 0 AS leader FROM new_rows
            UNION ALL
            SELECT leader, 0, 1 FROM new_rows WHERE leader >= 0
        ) AS delta GROUP BY broker ORDER BY broker
    LOOP
        PERFORM broker_load_add(d.broker, d.replicas, d.leaders);
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION broker_load_delete() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT broker, sum(replica)::integer AS replicas, sum(leader)::integer AS leaders FROM (
            SELECT unnest(replicas) AS broker, -1 AS replica, 0 AS leader FROM old_rows
            UNION ALL
            SELECT leader, 0, -1 FROM old_rows WHERE leader >= 0
        ) AS delta GROUP BY broker ORDER BY broker
    LOOP
        PERFORM broker_load_add(d.broker, d.replicas, d.leaders);
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION broker_load_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT broker, sum(replica)::integer AS replicas, sum(leader)::integer AS leaders FROM (
            SELECT unnest(replicas) AS broker, 1 AS replica, 0 AS leader FROM new_rows
            UNION ALL
            SELECT leader, 0, 1 FROM new_rows WHERE leader >= 0
            UNION ALL
            SELECT unnest(replicas), -1, 0 FROM old_rows
            UNION ALL
            SELECT leader, 0, -1 FROM old_rows WHERE leader >= 0
        ) AS delta GROUP BY broker
        HAVING sum(replica) <> 0 OR sum(leader) <> 0 ORDER BY broker
    LOOP
        PERFORM broker_load_add(d.broker, d.replicas, d.leaders);
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER partitions_load_insert
    AFTER INSERT ON partitions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION broker_load_insert();

CREATE TRIGGER partitions_load_delete
    AFTER DELETE ON partitions REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION broker_load_delete();

CREATE TRIGGER partitions_load_update
    AFTER UPDATE ON partitions REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION broker_load_update();

-- +goose Down
DROP TRIGGER partitions_load_update ON partitions;
DROP TRIGGER partitions_load_delete ON partitions;
DROP TRIGGER partitions_load_insert ON partitions;
DROP FUNCTION broker_load_update();
DROP FUNCTION broker_load_delete();
DROP FUNCTION broker_load_insert();
DROP FUNCTION broker_load_add(integer, integer, integer);
DROP TABLE broker_load;
