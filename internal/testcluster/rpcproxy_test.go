package testcluster

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

type usageServer struct {
	sluicev1connect.UnimplementedBrokerServiceHandler
	reports atomic.Int64
}

func (s *usageServer) ReportUsage(context.Context, *connect.Request[sluicev1.ReportUsageRequest]) (*connect.Response[sluicev1.ReportUsageResponse], error) {
	s.reports.Add(1)
	return connect.NewResponse(&sluicev1.ReportUsageResponse{}), nil
}

func (s *usageServer) WatchAssignments(ctx context.Context, _ *connect.Request[sluicev1.WatchAssignmentsRequest], st *connect.ServerStream[sluicev1.WatchAssignmentsResponse]) error {
	for range 3 {
		if err := st.Send(&sluicev1.WatchAssignmentsResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// TestRPCProxyDropsOneMethodsAnswers: with ReportUsage's answers dropped,
// the call reaches the server and the caller gets UNAVAILABLE; a stream
// of another method passes meanwhile; once passing again, answers arrive.
func TestRPCProxyDropsOneMethodsAnswers(t *testing.T) {
	srv := &usageServer{}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewBrokerServiceHandler(srv))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: mux, Protocols: &protos}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { hs.Close() })

	p := NewRPCProxy(t, ln.Addr().String())
	cl := sluicev1connect.NewBrokerServiceClient(testClient(nil), "http://"+p.Addr(), connect.WithGRPC())
	ctx := t.Context()
	if _, err := cl.ReportUsage(ctx, connect.NewRequest(&sluicev1.ReportUsageRequest{})); err != nil {
		t.Fatalf("passing: %v", err)
	}
	p.DropAnswers("ReportUsage", true)
	_, err = cl.ReportUsage(ctx, connect.NewRequest(&sluicev1.ReportUsageRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("dropped: got %v, want unavailable", err)

	}
	if n := srv.reports.Load(); n != 2 {
		t.Fatalf("server saw %d reports, want 2 (the dropped one served)", n)
	}
	st, err := cl.WatchAssignments(ctx, connect.NewRequest(&sluicev1.WatchAssignmentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for st.Receive() {
		msgs++
	}
	if st.Err() != nil || msgs != 3 {
		t.Fatalf("stream while dropping another method: %d messages, %v", msgs, st.Err())
	}
	p.DropAnswers("ReportUsage", false)
	if _, err := cl.ReportUsage(ctx, connect.NewRequest(&sluicev1.ReportUsageRequest{})); err != nil {
		t.Fatalf("passing again: %v", err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("dropped %d answers, want 1", p.Dropped())
	}
}
