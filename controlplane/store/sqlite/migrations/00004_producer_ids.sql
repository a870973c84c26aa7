-- Producer-id blocks for idempotent producers (Kafka's KIP-730).
--
-- producer_id_counter holds exactly one row (id = 1): the first producer id
-- not yet handed out. AllocateProducerIDs moves it forward inside the
-- store's single write transaction, so blocks never overlap and an id is
-- never reused. producer_id_blocks records who got which block, for audit.

-- +goose Up
CREATE TABLE producer_id_counter (
    id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    next_id INTEGER NOT NULL CHECK (next_id >= 0)
);

INSERT INTO producer_id_counter (id, next_id) VALUES (1, 0);

CREATE TABLE producer_id_blocks (
    first_id     INTEGER NOT NULL PRIMARY KEY,
    count        INTEGER NOT NULL CHECK (count > 0),
    broker_id    INTEGER NOT NULL,
    broker_epoch INTEGER NOT NULL,
    allocated_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE producer_id_blocks;
DROP TABLE producer_id_counter;
