package api

import (
	"context"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/endpoint"
)

// metadataService answers RecordService.GetMetadata on the control plane,
// so that a client that knows only the control-plane endpoint learns the
// brokers and partition leaders (it then refreshes from the brokers). The
// data RPCs are served by brokers only.
type metadataService struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	*API
}

func (s *metadataService) GetMetadata(ctx context.Context, req *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	res := &sluicev1.GetMetadataResponse{}
	for _, b := range brokers {
		if b.Live(now) {
			res.Brokers = append(res.Brokers, &sluicev1.BrokerAddress{Id: b.ID, Address: endpoint.For(ctx, b.Address, b.ExternalAddress), Rack: b.Rack})
		}
	}
	names := req.Msg.GetTopics()
	if len(names) == 0 {
		all, err := s.store.ListTopics(ctx, p.TenantID)
		if err != nil {
			return nil, err
		}
		for _, t := range all {
			names = append(names, t.Name)
		}
	}
	for _, name := range names {
		t, err := s.getTopic(ctx, p.TenantID, name)
		if err != nil {
			return nil, err
		}
		parts, err := s.store.ListPartitions(ctx, t.ID)
		if err != nil {
			return nil, err
		}
		tm := &sluicev1.TopicMetadata{Name: t.Name, Id: t.ID, MaxMessageBytes: t.Config.MaxMessageBytes}
		for _, pt := range parts {
			tm.Partitions = append(tm.Partitions, &sluicev1.PartitionMetadata{
				Partition: pt.Partition, Leader: pt.Leader, LeaderEpoch: pt.LeaderEpoch, Replicas: pt.Replicas, Isr: pt.ISR,
			})
		}
		res.Topics = append(res.Topics, tm)
	}
	return connect.NewResponse(res), nil
}
