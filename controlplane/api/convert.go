package api

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func decodeOverrides(b []byte) (tenants.Overrides, error) {
	var o tenants.Overrides
	if len(b) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("decode limit overrides: %w", err)
	}
	return o, nil
}

func toTenantPB(t store.Tenant) (*sluicev1.Tenant, error) {
	l, o, err := limitsOf(t)
	if err != nil {
		return nil, err
	}
	return &sluicev1.Tenant{
		Id:         t.ID,
		Name:       t.Name,
		Email:      t.Email,
		Plan:       t.Plan,
		Status:     t.Status,
		CreateTime: ts(t.CreatedAt),
		Limits:     toLimitsPB(l),
		Overrides:  toOverridesPB(o),
	}, nil
}

func toLimitsPB(l tenants.Limits) *sluicev1.Limits {
	return &sluicev1.Limits{
		MaxTopics:          l.MaxTopics,
		MaxPartitions:      l.MaxPartitions,
		MaxRetentionMs:     l.MaxRetentionMs,
		MaxStorageBytes:    l.MaxStorageBytes,
		MaxMessageBytes:    l.MaxMessageBytes,
		ProduceBytesPerSec: l.ProduceBytesPerSec,
		FetchBytesPerSec:   l.FetchBytesPerSec,
		RequestsPerSec:     l.RequestsPerSec,

		MaxTotalStorageBytes: l.MaxTotalStorageBytes,
		ProducerIdsPerHour:   l.ProducerIDsPerHour,
		MaxTransactionalIds:  l.MaxTransactionalIDs,
		MaxGroups:            l.MaxGroups,

		MaxPartitionsPerTransaction: l.MaxPartitionsPerTransaction,
		MaxGroupsPerTransaction:     l.MaxGroupsPerTransaction,
	}
}

func toOverridesPB(o tenants.Overrides) *sluicev1.LimitOverrides {
	return &sluicev1.LimitOverrides{
		MaxTopics:          o.MaxTopics,
		MaxPartitions:      o.MaxPartitions,
		MaxRetentionMs:     o.MaxRetentionMs,
		MaxStorageBytes:    o.MaxStorageBytes,
		MaxMessageBytes:    o.MaxMessageBytes,
		ProduceBytesPerSec: o.ProduceBytesPerSec,
		FetchBytesPerSec:   o.FetchBytesPerSec,
		RequestsPerSec:     o.RequestsPerSec,

		MaxTotalStorageBytes: o.MaxTotalStorageBytes,
		ProducerIdsPerHour:   o.ProducerIDsPerHour,
		MaxTransactionalIds:  o.MaxTransactionalIDs,
		MaxGroups:            o.MaxGroups,

		MaxPartitionsPerTransaction: o.MaxPartitionsPerTransaction,
		MaxGroupsPerTransaction:     o.MaxGroupsPerTransaction,
	}
}

func fromOverridesPB(p *sluicev1.LimitOverrides) tenants.Overrides {
	return tenants.Overrides{
		MaxTopics:          p.MaxTopics,
		MaxPartitions:      p.MaxPartitions,
		MaxRetentionMs:     p.MaxRetentionMs,
		MaxStorageBytes:    p.MaxStorageBytes,
		MaxMessageBytes:    p.MaxMessageBytes,
		ProduceBytesPerSec: p.ProduceBytesPerSec,
		FetchBytesPerSec:   p.FetchBytesPerSec,
		RequestsPerSec:     p.RequestsPerSec,

		MaxTotalStorageBytes: p.MaxTotalStorageBytes,
		ProducerIDsPerHour:   p.ProducerIdsPerHour,
		MaxTransactionalIDs:  p.MaxTransactionalIds,
		MaxGroups:            p.MaxGroups,

		MaxPartitionsPerTransaction: p.MaxPartitionsPerTransaction,
		MaxGroupsPerTransaction:     p.MaxGroupsPerTransaction,
	}
}

func toAPIKeyPB(k store.APIKey) *sluicev1.APIKey {
	return &sluicev1.APIKey{
		Id:         k.ID,
		Name:       k.Name,
		Scopes:     k.Scopes,
		CreateTime: ts(k.CreatedAt),
		RevokeTime: ts(k.RevokedAt),
	}
}

func toTopicPB(t store.Topic) *sluicev1.Topic {
	c := t.Config
	return &sluicev1.Topic{
		Id:                t.ID,
		Name:              t.Name,
		PartitionCount:    t.Partitions,
		ReplicationFactor: t.ReplicationFactor,
		Config:            toTopicConfigPB(c),
		CreateTime:        ts(t.CreatedAt),
		UpdateTime:        ts(t.UpdatedAt),
	}
}

// toTopicConfigPB returns the config with every field set.
func toTopicConfigPB(c store.TopicConfig) *sluicev1.TopicConfig {
	return &sluicev1.TopicConfig{
		RetentionMs:                 &c.RetentionMs,
		RetentionBytes:              &c.RetentionBytes,
		LocalRetentionMs:            &c.LocalRetentionMs,
		LocalRetentionBytes:         &c.LocalRetentionBytes,
		MaxMessageBytes:             &c.MaxMessageBytes,
		MinInsyncReplicas:           &c.MinInsyncReplicas,
		CleanupPolicy:               &c.CleanupPolicy,
		UncleanLeaderElectionEnable: &c.UncleanLeaderElection,
	}
}

func toPartitionsPB(ps []store.Partition) []*sluicev1.PartitionInfo {
	out := make([]*sluicev1.PartitionInfo, len(ps))
	for i, p := range ps {
		out[i] = &sluicev1.PartitionInfo{
			Partition:   p.Partition,
			Leader:      p.Leader,
			LeaderEpoch: p.LeaderEpoch,
			Replicas:    p.Replicas,
			Isr:         p.ISR,
		}
	}
	return out
}

func toBrokerPB(b store.Broker, now time.Time) *sluicev1.Broker {
	return &sluicev1.Broker{
		Id:              b.ID,
		Address:         b.Address,
		Rack:            b.Rack,
		Epoch:           b.Epoch,
		LeaseExpireTime: ts(b.LeaseExpiresAt),
		Live:            b.Live(now),
	}
}
