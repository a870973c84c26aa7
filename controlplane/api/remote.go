package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Remote segment metadata (tiered storage). Being built: answers
// Unimplemented until the store holds remote segments.

func (s *brokerService) AddRemoteSegment(context.Context, *connect.Request[sluicev1.AddRemoteSegmentRequest]) (*connect.Response[sluicev1.AddRemoteSegmentResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("remote segments: not built yet"))
}

func (s *brokerService) UpdateRemoteSegment(context.Context, *connect.Request[sluicev1.UpdateRemoteSegmentRequest]) (*connect.Response[sluicev1.UpdateRemoteSegmentResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("remote segments: not built yet"))
}

func (s *brokerService) ListRemoteSegments(context.Context, *connect.Request[sluicev1.ListRemoteSegmentsRequest]) (*connect.Response[sluicev1.ListRemoteSegmentsResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("remote segments: not built yet"))
}
