-- Partition updates bump the metadata version once per statement, not once
-- per row, so that a batched write (store.UpdatePartitions: one UPDATE of
-- many partitions) bumps it once. Updating the one metadata_version row
-- once per partition in a single transaction piles up row versions that
-- each later update walks: 500 partitions took longer batched than one by
-- one.
--
-- The trigger is statement-level with a transition table and bumps only
-- when the statement changed a row (a lost compare-and-set changes none,
-- as with the row trigger it replaces). Its name sorts before
-- partitions_load_update (migrations/00010): triggers of one kind fire in
-- name order, so an update still locks the metadata_version row before any
-- broker_load row, as inserts and deletes do.

-- +goose Up
DROP TRIGGER partitions_update_bump_metadata_version ON partitions;

-- +goose StatementBegin
CREATE FUNCTION bump_metadata_version_if_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows) THEN
        UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER partitions_bump_metadata_version_on_update
    AFTER UPDATE ON partitions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bump_metadata_version_if_changed();

-- +goose Down
DROP TRIGGER partitions_bump_metadata_version_on_update ON partitions;
DROP FUNCTION bump_metadata_version_if_changed();
CREATE TRIGGER partitions_update_bump_metadata_version
    AFTER UPDATE ON partitions
    FOR EACH ROW EXECUTE FUNCTION bump_metadata_version();
