package api

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// EnsureOffsetsTopic creates the internal offsets topic (system.OffsetsTopic,
// owned by system.TenantID) once enough brokers are live for its
// replication factor. It reports whether the topic exists now. Several
// control-plane replicas may race: the store lets one create it.
//
// Its records never expire (retention.ms -1): committed offsets must
// outlive any data retention. The log grows with every commit until
// compaction exists.
func (a *API) EnsureOffsetsTopic(ctx context.Context) (bool, error) {
	return a.ensureInternalTopic(ctx, system.OffsetsTopic, a.cfg.OffsetsTopicPartitions, a.cfg.OffsetsTopicReplicationFactor)
}

// EnsureTransactionStateTopic creates the internal transaction-state topic
// (system.TransactionStateTopic, owned by system.TenantID) as
// EnsureOffsetsTopic creates the offsets topic, with the same retention
// (-1: a transactional id's last record must outlive any data retention;
// the coordinators forget idle ids with tombstones, but the log grows
// until compaction exists).
func (a *API) EnsureTransactionStateTopic(ctx context.Context) (bool, error) {
	return a.ensureInternalTopic(ctx, system.TransactionStateTopic, a.cfg.TransactionStateTopicPartitions, a.cfg.TransactionStateTopicReplicationFactor)
}

func (a *API) ensureInternalTopic(ctx context.Context, name string, n, rf int32) (bool, error) {
	if _, err := a.store.GetTopic(ctx, system.TenantID, name); err == nil {
		return true, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	cfg := defaultTopicConfig(tenants.Limits{}, rf)
	cfg.RetentionMs = unlimited
	topic, _, err := a.placeAndCreate(ctx, system.TenantID, name, n, rf, cfg, store.CountLimits{})
	switch {
	case errors.Is(err, store.ErrAlreadyExists):
		return true, nil
	case err != nil:
		return false, err
	}
	a.logger.InfoContext(ctx, "created an internal topic", "topic", name, "id", topic.ID, "partitions", n, "rf", rf)
	return true, nil
}
