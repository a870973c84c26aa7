-- Per-topic opt-in to unclean leader election (unclean.leader.election.enable).

-- +goose Up
ALTER TABLE topics ADD COLUMN unclean_leader_election boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE topics DROP COLUMN unclean_leader_election;
