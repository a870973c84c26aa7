-- A broker's Kafka listener (issue 32): the host:port Kafka clients reach
-- it at; empty for a broker without one.

-- +goose Up
ALTER TABLE brokers ADD COLUMN kafka_address TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE brokers DROP COLUMN kafka_address;
