package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/groups"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// The consumer groups' service is dataplane/groups, its Connect handler
// connectapi.Groups. This file wires them: the service's dependencies on
// the broker (its coordinators' hosting, the record service at
// partitions' leaders, the other brokers' group services, admission, the
// transaction coordinators), the group lag loop, and ListGroupLags.

// newGroups builds the broker's group service (New).
func (b *Broker) newGroups() *groups.Service {
	return groups.New(groups.Config{
		BrokerID:       b.cfg.ID,
		SessionTimeout: b.cfg.GroupSessionTimeout, HeartbeatInterval: b.cfg.GroupHeartbeatInterval,
		LagMetrics: b.cfg.GroupLagMetricsInterval > 0,
		Logger:     b.logger,
	}, groups.Deps{
		View:      b.metadata,
		Host:      b.hostGroupCoordinator,
		Admission: b.quota,
		Leaders:   groupLeaders{b},
		Peers:     groupPeers{b},
		VerifyTransactionGroup: func(ctx context.Context, cred groups.Credentials, tenantID, transactionalID, group string, producerID int64, epoch int16) error {
			h := http.Header{}
			h.Set("Authorization", cred.Authorization)
			return b.verifyTransactionGroup(ctx, h, tenantID, transactionalID, group, producerID, epoch)
		},
		Registerer: b.registry,
	})
}

// groupsHandler is the GroupService's Connect handler.
func (b *Broker) groupsHandler() *connectapi.Groups {
	return connectapi.NewGroups(b.groups, func(id int32) sluicev1connect.GroupServiceClient { return b.peer(id).group }, b.metrics.forwarded.Inc)
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

// groupLeaders are groups.Leaders: the record service's ListOffsets and
// Fetch at a partition's leader, this broker's handler when it leads.
type groupLeaders struct{ b *Broker }

// prepare sets the headers of a request to t's leader and returns the
// context to call this broker's own handler with: it carries the principal
// the auth interceptor would have set (a client's is already in ctx).
func (b *Broker) prepare(ctx context.Context, cred groups.Credentials, t *cluster.Topic, h http.Header) context.Context {
	h.Set(NoForwardHeader, "1")
	if !cred.Broker {
		h.Set("Authorization", cred.Authorization)
		return ctx
	}
	h.Set("Authorization", "Bearer "+b.cfg.BrokerToken)
	h.Set(actForTenantHeader, t.TenantID)
	return tenants.WithPrincipal(ctx, tenants.Principal{Kind: tenants.PrincipalBroker, BrokerID: b.cfg.ID, TenantID: t.TenantID})
}

// leaderError is a leader's refusal as the group service reads it: a
// Connect error's message (not its code) as the text, under its kind.
func leaderError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &derr.Error{Kind: connecterr.KindOfCode(ce.Code()), Err: errors.New(ce.Message())}
	}
	return err
}

func (l groupLeaders) ListOffsets(ctx context.Context, cred groups.Credentials, t *cluster.Topic, pm cluster.Partition, spec groups.OffsetSpec, ts int64) (groups.Offsets, error) {
	b := l.b
	req := connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: t.Name, Partition: pm.Partition, Spec: sluicev1.OffsetSpec(spec), TimestampMs: ts})
	ctx = b.prepare(ctx, cred, t, req.Header())
	var res *connect.Response[sluicev1.ListOffsetsResponse]
	var err error
	if pm.Leader == b.cfg.ID {
		res, err = b.recordsAPI.ListOffsets(ctx, req)
	} else {
		res, err = b.recordClient(pm.Leader).ListOffsets(ctx, req)
	}
	if err != nil {
		return groups.Offsets{}, leaderError(err)
	}
	m := res.Msg
	return groups.Offsets{
		Offset: m.GetOffset(), LogStartOffset: m.GetLogStartOffset(), HighWatermark: m.GetHighWatermark(),
		LastStableOffset: m.GetLastStableOffset(), PartitionSize: m.GetSizeBytes(),
	}, nil
}

func (l groupLeaders) Fetch(ctx context.Context, cred groups.Credentials, t *cluster.Topic, pm cluster.Partition, offset int64, maxBytes int32, readCommitted bool) (groups.Fetched, error) {
	b := l.b
	iso := sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	if readCommitted {
		iso = sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	req := connect.NewRequest(&sluicev1.FetchRequest{Topic: t.Name, Partition: pm.Partition, Offset: offset, MaxBytes: maxBytes, RawBatches: true, IsolationLevel: iso})
	ctx = b.prepare(ctx, cred, t, req.Header())
	var res *connect.Response[sluicev1.FetchResponse]
	var err error
	if pm.Leader == b.cfg.ID {
		res, err = b.recordsAPI.Fetch(ctx, req)
	} else {
		res, err = b.recordClient(pm.Leader).Fetch(ctx, req)
	}
	if err != nil {
		return groups.Fetched{}, leaderError(err)
	}
	return groups.Fetched{Batches: res.Msg.GetBatches().GetData(), NextOffset: res.Msg.GetNextOffset()}, nil
}

// groupPeers are groups.Peers: the other brokers' GroupService.
type groupPeers struct{ b *Broker }

// ListGroups asks broker id for the groups it coordinates, with the
// client's credential (counted as a forwarded call).
func (p groupPeers) ListGroups(ctx context.Context, id int32, cred groups.Credentials) ([]groups.GroupSummary, error) {
	req := connect.NewRequest(&sluicev1.ListGroupsRequest{})
	req.Header().Set("Authorization", cred.Authorization)
	res, err := forward(ctx, p.b, cluster.Partition{Leader: id}, req, p.b.peer(id).group.ListGroups)
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	out := make([]groups.GroupSummary, 0, len(res.Msg.GetGroups()))
	for _, g := range res.Msg.GetGroups() {
		out = append(out, groups.GroupSummary{Group: g.GetGroup(), State: g.GetState(), Members: g.GetMembers()})
	}
	return out, nil
}

// askCoordinators answers a list request that every coordinator of an
// internal topic (the transaction-state topic) answers for its own
// partitions: with the no-forward header, this broker's own list (local);
// otherwise the lists of every broker leading a partition of it, this
// one's from local and the others' through remote (forwarded with the
// client's credential), sorted by key and without the duplicates a
// leadership move can give. A partition without a leader, or a broker
// that fails, makes it Unavailable: the list would be incomplete.
// (groups.Service.ListGroups does the same for the groups.)
func askCoordinators[Req, Res, T any](ctx context.Context, b *Broker, req *connect.Request[Req], topic string, errNoTopic error, what string,
	local func() ([]T, error),
	remote func(id int32) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	items func(*Res) []T, key func(T) string,
) ([]T, error) {
	if req.Header().Get(NoForwardHeader) == "1" {
		return local()
	}
	t, ok := b.metadata().Topic(systemTenantID, topic)
	if !ok {
		return nil, errNoTopic
	}
	leaders := map[int32]bool{}
	for _, pm := range t.Partitions {
		if pm.Leader < 0 {
			return nil, b.notLeader(pm) // a coordinator is offline: the list would be incomplete
		}
		leaders[pm.Leader] = true
	}
	var (
		mu   sync.Mutex
		all  []T
		errs []error
		wg   sync.WaitGroup
	)
	for id := range leaders {
		wg.Go(func() {
			var out []T
			var err error
			if id == b.cfg.ID {
				out, err = local()
			} else {
				var res *connect.Response[Res]
				res, err = forward(ctx, b, cluster.Partition{Leader: id}, req, remote(id))
				if err == nil {
					out = items(res.Msg)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, out...)
			if err != nil {
				errs = append(errs, fmt.Errorf("broker %d: %w", id, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, derr.New(derr.Unavailable, "%s: %w", what, errors.Join(errs...))
	}
	slices.SortFunc(all, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	// During a leadership move two brokers may both answer for a key.
	return slices.CompactFunc(all, func(a, b T) bool { return key(a) == key(b) }), nil
}
