package broker

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/groups"
	"github.com/sluicemq/sluice/dataplane/txns"
)

// The consumer groups' service is dataplane/groups, its Connect handler
// connectapi.Groups. This file wires them: the service's dependencies on
// the broker (its coordinators' hosting, admission, the transaction
// coordinators) and on other brokers (the record service at partitions'
// leaders and the other brokers' group services, over Connect:
// connectapi.GroupLeaders and GroupPeers), and the group lag loop.

// newGroups builds the broker's group service (New).
func (b *Broker) newGroups() *groups.Service {
	return groups.New(groups.Config{
		BrokerID:       b.cfg.ID,
		SessionTimeout: b.cfg.GroupSessionTimeout, HeartbeatInterval: b.cfg.GroupHeartbeatInterval,
		InitialRebalanceDelay: b.cfg.GroupInitialRebalanceDelay,
		LagMetrics:            b.cfg.GroupLagMetricsInterval > 0,
		Logger:                b.logger,
	}, groups.Deps{
		View:      b.metadata,
		Host:      b.hostGroupCoordinator,
		Admission: b.quota,
		Leaders:   connectapi.GroupLeaders{BrokerID: b.cfg.ID, BrokerToken: b.cfg.BrokerToken, Local: b.recordsAPI, Leader: b.peers.Record},
		Peers:     connectapi.GroupPeers{Peer: b.peers.Group, Forwarded: b.metrics.forwarded.Inc},
		VerifyTransactionGroup: func(ctx context.Context, cred groups.Credentials, tenantID, transactionalID, group string, producerID int64, epoch int16, verifyOnly bool) error {
			return b.txns.VerifyGroup(ctx, txns.Verification{TenantID: tenantID, TransactionalID: transactionalID, ProducerID: producerID, ProducerEpoch: epoch,
				Authorization: cred.Authorization, VerifyOnly: verifyOnly}, group)
		},
		Registerer: b.registry,
	})
}

// groupsHandler is the GroupService's Connect handler.
func (b *Broker) groupsHandler() *connectapi.Groups {
	return connectapi.NewGroups(b.groups, b.peers.Group, b.metrics.forwarded.Inc)
}

// groupLagLoop computes the group lag metrics every interval until ctx
// ends; each round may take groups.LagRoundTimeout(interval).
func (b *Broker) groupLagLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		rctx, cancel := context.WithTimeout(ctx, groups.LagRoundTimeout(interval))
		defer cancel()
		b.computeGroupLag(rctx, time.Now())
	})
}

// computeGroupLag runs one round of the group lag metrics at now, capped
// at --group-lag-metrics-max-series.
func (b *Broker) computeGroupLag(ctx context.Context, now time.Time) {
	b.groups.ComputeLag(ctx, now, b.cfg.GroupLagMetricsMaxSeries)
}
