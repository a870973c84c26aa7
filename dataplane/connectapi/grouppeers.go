package connectapi

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/access"
	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/groups"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// The group service's calls to partitions' leaders and to other brokers
// (groups.Leaders, groups.Peers), over their Connect services.

// GroupLeaders are groups.Leaders: the RecordService's ListOffsets and
// Fetch at a partition's leader, this broker's own adapter (Local) when it
// leads.
type GroupLeaders struct {
	// BrokerID is this broker's id, BrokerToken its credential (for the
	// calls the service makes on its own behalf: the lag metrics).
	BrokerID    int32
	BrokerToken string
	// Local is this broker's RecordService adapter.
	Local *Records
	// Leader is the RecordService of another broker.
	Leader func(id int32) sluicev1connect.RecordServiceClient
}

var _ groups.Leaders = GroupLeaders{}

// prepare sets the headers of a request to t's leader and returns the
// context to call this broker's own handler with: it carries the principal
// the auth interceptor would have set (a client's is already in ctx).
func (l GroupLeaders) prepare(ctx context.Context, cred groups.Credentials, t *cluster.Topic, h http.Header) context.Context {
	h.Set(NoForwardHeader, "1")
	if !cred.Broker {
		h.Set("Authorization", cred.Authorization)
		return ctx
	}
	h.Set("Authorization", "Bearer "+l.BrokerToken)
	h.Set(access.ActForTenantHeader, t.TenantID)
	return tenants.WithPrincipal(ctx, tenants.Principal{Kind: tenants.PrincipalBroker, BrokerID: l.BrokerID, TenantID: t.TenantID})
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

func (l GroupLeaders) ListOffsets(ctx context.Context, cred groups.Credentials, t *cluster.Topic, pm cluster.Partition, spec groups.OffsetSpec, ts int64) (groups.Offsets, error) {
	req := connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: t.Name, Partition: pm.Partition, Spec: sluicev1.OffsetSpec(spec), TimestampMs: ts})
	ctx = l.prepare(ctx, cred, t, req.Header())
	var res *connect.Response[sluicev1.ListOffsetsResponse]
	var err error
	if pm.Leader == l.BrokerID {
		res, err = l.Local.ListOffsets(ctx, req)
	} else {
		res, err = l.Leader(pm.Leader).ListOffsets(ctx, req)
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

func (l GroupLeaders) Fetch(ctx context.Context, cred groups.Credentials, t *cluster.Topic, pm cluster.Partition, offset int64, maxBytes int32, readCommitted bool) (groups.Fetched, error) {
	iso := sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	if readCommitted {
		iso = sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	req := connect.NewRequest(&sluicev1.FetchRequest{Topic: t.Name, Partition: pm.Partition, Offset: offset, MaxBytes: maxBytes, RawBatches: true, IsolationLevel: iso})
	ctx = l.prepare(ctx, cred, t, req.Header())
	var res *connect.Response[sluicev1.FetchResponse]
	var err error
	if pm.Leader == l.BrokerID {
		res, err = l.Local.Fetch(ctx, req)
	} else {
		res, err = l.Leader(pm.Leader).Fetch(ctx, req)
	}
	if err != nil {
		return groups.Fetched{}, leaderError(err)
	}
	return groups.Fetched{Batches: res.Msg.GetBatches().GetData(), NextOffset: res.Msg.GetNextOffset()}, nil
}

// GroupPeers are groups.Peers: the other brokers' GroupService.
type GroupPeers struct {
	// Peer is broker id's GroupService.
	Peer func(id int32) sluicev1connect.GroupServiceClient
	// Forwarded, when set, counts a forwarded answer.
	Forwarded func()
}

var _ groups.Peers = GroupPeers{}

// ListGroups asks broker id for the groups it coordinates, with the
// client's credential (counted as a forwarded call).
func (p GroupPeers) ListGroups(ctx context.Context, id int32, cred groups.Credentials) ([]groups.GroupSummary, error) {
	req := connect.NewRequest(&sluicev1.ListGroupsRequest{})
	req.Header().Set("Authorization", cred.Authorization)
	res, err := Forward(ctx, id, req, p.Peer(id).ListGroups, p.Forwarded)
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	out := make([]groups.GroupSummary, 0, len(res.Msg.GetGroups()))
	for _, g := range res.Msg.GetGroups() {
		out = append(out, groups.GroupSummary{Group: g.GetGroup(), State: g.GetState(), Members: g.GetMembers()})
	}
	return out, nil
}
