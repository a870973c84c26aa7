package records

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// TestRecordsFetchValidation: a fetch's fields are checked, with the
// API's field names, before the service looks at the leader; the
// isolation level after (a follower forwards it as it is); nothing is
// charged for a refused fetch.
func TestRecordsFetchValidation(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, tt := range []struct {
		req FetchRequest
		msg string
	}{
		{FetchRequest{Topic: "bench", MaxBytes: -1}, "max_bytes: must not be negative"},
		{FetchRequest{Topic: "bench", MaxWait: -time.Millisecond}, "max_wait_ms: must not be negative"},
		{FetchRequest{Topic: "bench", Offset: -2}, "offset: must not be negative; got -2"},
		{FetchRequest{Topic: "bench", Isolation: 7}, "isolation_level: unknown value 7"},
		{FetchRequest{Topic: "", Partition: 0}, "topic: must not be empty"},
		{FetchRequest{Topic: "bench", Partition: 3}, `topic "bench" partition 3 not found: this broker knows partitions 0..0 (partitions added just now reach every broker within moments)`},
	} {
		_, err := f.svc.Fetch(f.ctx, tt.req)
		require.EqualError(t, err, tt.msg)
	}
	require.Empty(t, f.quotas.take())

	f.view.Store(benchView(2, 1<<20))
	_, err := f.svc.Fetch(f.ctx, FetchRequest{Topic: "bench", Offset: -2})
	require.EqualError(t, err, "offset: must not be negative; got -2")
	_, err = f.svc.Fetch(f.ctx, FetchRequest{Topic: "bench", Isolation: 7})
	leader, ok := LeaderElsewhere(err)
	require.True(t, ok, "%v", err)
	require.EqualValues(t, 2, leader)
	_, err = f.svc.ListOffsets(f.ctx, ListOffsetsRequest{Topic: "bench", Spec: 0})
	require.EqualError(t, err, "spec: choose earliest, latest, timestamp or max timestamp")
	_, err = f.svc.ListOffsets(f.ctx, ListOffsetsRequest{Topic: "bench", Spec: Latest, Isolation: 7})
	_, ok = LeaderElsewhere(err)
	require.True(t, ok, "%v", err)
	require.Empty(t, f.quotas.take())
}

// TestRecordsFetchCharges: an admitted fetch is checked against at most
// 64 MiB (1 MiB by default) and charged what it answered; a tenant's
// fetched bytes are metered, a broker's own reads are not; a fetch
// refused by the quota reads nothing.
func TestRecordsFetchCharges(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := batch(t, 3, -1, 0, 0)
	_, err := f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: BatchPayload(b)}, nil)
	require.NoError(t, err)
	f.quotas.take()

	res, err := f.svc.Fetch(f.ctx, FetchRequest{Topic: "bench"})
	require.NoError(t, err)
	require.Equal(t, FetchResult{HW: 3, LSO: 3, LogStartOffset: 0, NextOffset: 3, Data: res.Data}, res)
	require.Len(t, res.Data, len(b))
	_, err = f.svc.Fetch(f.ctx, FetchRequest{Topic: "bench", MaxBytes: 1 << 30, Offset: 3})
	require.NoError(t, err)
	require.Equal(t, []string{"check fetch 1048576", fmt.Sprintf("charge fetch %d", len(b)), "check fetch 67108864", "charge fetch 0"}, f.quotas.take())

	broker := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalBroker, BrokerID: 1, TenantID: "t1"})
	_, err = f.svc.Fetch(broker, FetchRequest{Topic: "bench"})
	require.NoError(t, err)
	require.Equal(t, []string{"check fetch 1048576", fmt.Sprintf("charge fetch %d", len(b))}, f.quotas.take())

	// A fetch whose caller gave up (its deadline passed while it read) is
	// answered to no one: neither charged nor billed as egress.
	gone, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err = f.svc.Fetch(gone, FetchRequest{Topic: "bench"})
	require.ErrorIs(t, err, derr.Canceled)
	require.Equal(t, []string{"check fetch 1048576"}, f.quotas.take())

	f.quotas.fetchErr = derr.New(derr.ResourceExhausted, "over the quota")
	_, err = f.svc.Fetch(f.ctx, FetchRequest{Topic: "bench"})
	require.ErrorIs(t, err, derr.ResourceExhausted)
	require.Equal(t, []string{"check fetch 1048576"}, f.quotas.take())
}

// TestRecordsFetchSuspendedLongPoll: a tenant's long poll at the end of
// the partition ends as soon as the tenant is suspended, answered
// TopicAuthorizationFailed (PermissionDenied), not when its wait does.
func TestRecordsFetchSuspendedLongPoll(t *testing.T) {
	t.Parallel()
	f := setup(t)
	done := make(chan error, 1)
	go func() {
		_, err := f.svc.Fetch(f.ctx, FetchRequest{Topic: "bench", MaxWait: 30 * time.Second})
		done <- err
	}()
	testenv.Wait(t, 10*time.Second, "the fetch checked its quota", func() error {
		f.quotas.mu.Lock()
		defer f.quotas.mu.Unlock()
		if len(f.quotas.calls) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	close(f.suspend)
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the long poll did not end when its tenant was suspended")
	}
	require.ErrorIs(t, err, derr.TopicAuthorizationFailed)
	require.ErrorIs(t, err, tenants.ErrPermissionDenied)
	require.Equal(t, connect.CodePermissionDenied, codeOf(err))
	require.EqualError(t, err, "permission denied: tenant is suspended")

	// Without a wait, or for a broker, nothing is watched.
	ctx, stop := f.svc.LongPoll(f.ctx, 0)
	stop()
	require.Equal(t, f.ctx, ctx)
	broker := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalBroker, BrokerID: 1, TenantID: "t1"})
	ctx, stop = f.svc.LongPoll(broker, time.Second)
	stop()
	require.Equal(t, broker, ctx)
	require.NoError(t, Suspended(ctx, nil))
	other := errors.New("x")
	require.Equal(t, other, Suspended(ctx, other))
}

// TestRecordsListOffsets: earliest, latest (the LSO with read_committed),
// by timestamp (the first record at or after it, -1 past the end) and the
// largest timestamp, each found record's timestamp answered.
func TestRecordsListOffsets(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, err := f.svc.ListOffsets(f.ctx, ListOffsetsRequest{Topic: "bench", Spec: MaxTimestamp})
	require.NoError(t, err)
	require.Equal(t, [2]int64{-1, -1}, [2]int64{res.Offset, res.Timestamp}, "max timestamp of an empty partition")
	// Out of order, as a client may send them: the largest is in the middle.
	_, err = f.svc.Produce(f.ctx, ProduceRequest{Topic: "bench", Payload: RecordPayload(RecordSlice{
		{TimestampMs: 1000, Value: []byte("a")}, {TimestampMs: 3000, Value: []byte("b")}, {TimestampMs: 2000, Value: []byte("c")}})}, nil)
	require.NoError(t, err)
	list := func(spec OffsetSpec, ts int64) [2]int64 {
		t.Helper()
		res, err := f.svc.ListOffsets(f.ctx, ListOffsetsRequest{Topic: "bench", Spec: spec, TimestampMs: ts, Isolation: ReadCommitted})
		require.NoError(t, err)
		require.EqualValues(t, 3, res.HW)
		require.EqualValues(t, 3, res.LSO)
		require.Zero(t, res.LocalLogStartOffset)
		require.Positive(t, res.SizeBytes)
		return [2]int64{res.Offset, res.Timestamp}
	}
	require.Equal(t, [2]int64{0, -1}, list(Earliest, 0))
	require.Equal(t, [2]int64{3, -1}, list(Latest, 0))
	require.Equal(t, [2]int64{0, 1000}, list(Timestamp, 500))
	require.Equal(t, [2]int64{1, 3000}, list(Timestamp, 1500))
	require.Equal(t, [2]int64{-1, -1}, list(Timestamp, 5000))
	require.Equal(t, [2]int64{1, 3000}, list(MaxTimestamp, 0))
	_, err = f.svc.ListOffsets(f.ctx, ListOffsetsRequest{Topic: "bench", Spec: Latest, Isolation: 9})
	require.EqualError(t, err, "isolation_level: unknown value 9")
}

// TestRecordsMetadata: the brokers by id and the caller's topics, all of
// them by name when none is asked; another tenant's topic is not found.
func TestRecordsMetadata(t *testing.T) {
	t.Parallel()
	f := setup(t)
	md, err := f.svc.Metadata(f.ctx, nil)
	require.NoError(t, err)
	require.Len(t, md.Brokers, 2)
	require.EqualValues(t, 1, md.Brokers[0].ID)
	require.EqualValues(t, 2, md.Brokers[1].ID)
	require.Len(t, md.Topics, 1)
	require.Equal(t, "bench", md.Topics[0].Name)
	other := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t2"})
	_, err = f.svc.Metadata(other, []string{"bench"})
	require.EqualError(t, err, `topic "bench" not found`)
	md, err = f.svc.Metadata(other, nil)
	require.NoError(t, err)
	require.Empty(t, md.Topics)
	_, err = f.svc.Metadata(context.Background(), nil)
	require.ErrorIs(t, err, errNoPrincipal)
	require.Equal(t, connect.CodeUnknown, codeOf(err), "not a domain error: the interceptor answers it as internal")
	var nl *partition.NotLeaderError
	require.False(t, errors.As(err, &nl))
}
