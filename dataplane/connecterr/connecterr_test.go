package connecterr

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func details(t *testing.T, err error) []proto.Message {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	var out []proto.Message
	for _, d := range ce.Details() {
		v, verr := d.Value()
		require.NoError(t, verr)
		out = append(out, v)
	}
	return out
}

func requireDetails(t *testing.T, err error, want ...proto.Message) {
	t.Helper()
	got := details(t, err)
	require.Len(t, got, len(want), "%v", got)
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "detail %d: got %v, want %v", i, got[i], want[i])
	}
}

// TestCodeCoversEveryKind: every kind has a Connect code, and every
// Connect code a generic kind that maps back to it.
func TestCodeCoversEveryKind(t *testing.T) {
	require.Len(t, codes, len(derr.Kinds()))
	for _, k := range derr.Kinds() {
		require.NotZero(t, codes[k], "kind %v has no Connect code", k)
	}
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		require.Equal(t, c, Code(KindOfCode(c)), "code %v", c)
	}
	require.Equal(t, derr.Unknown, KindOfCode(connect.Code(99)))
}

// TestCodeTableMatchesTheDocs: docs/design/errors.md lists every kind
// with the Connect code Code gives it.
func TestCodeTableMatchesTheDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/design/errors.md")
	require.NoError(t, err)
	documented := map[string]string{}
	for line := range strings.Lines(string(b)) {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		kind := strings.Trim(strings.TrimSpace(cols[1]), "`")
		documented[kind] = strings.Trim(strings.TrimSpace(cols[2]), "`")
	}
	for _, k := range derr.Kinds() {
		code, ok := documented[k.String()]
		require.True(t, ok, "docs/design/errors.md has no row for %v", k)
		require.Equal(t, Code(k).String(), code, "docs/design/errors.md: the Connect code of %v", k)
	}
}

func TestToConnectNotLeader(t *testing.T) {
	nl := &derr.NotLeaderError{TopicID: "t1", Partition: 3, Leader: 2, Epoch: 7, Address: "b2:9092"}
	err := ToConnect(fmt.Errorf("produce: %w", nl))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, nl.Error(), ce.Message(), "the message is the domain error's, not its wrapper's")
	requireDetails(t, err, &sluicev1.NotLeader{LeaderId: 2, LeaderAddress: "b2:9092", LeaderEpoch: 7, TopicId: "t1", Partition: 3})
	require.ErrorIs(t, err, derr.NotLeaderOrFollower)

	// Offline, or named leader but not leading yet: retry here.
	for _, nl := range []*derr.NotLeaderError{{Leader: -1}, {Leader: 1, Self: true, Epoch: 2}} {
		err := ToConnect(nl)
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", nl)
		require.Len(t, details(t, err), 1)
		require.ErrorIs(t, err, derr.LeaderNotAvailable)
	}
}

func TestToConnectDetails(t *testing.T) {
	for _, c := range []struct {
		name string
		err  *derr.Error
		code connect.Code
		want []proto.Message
	}{
		{"not enough replicas", &derr.Error{Kind: derr.NotEnoughReplicas, Err: errors.New("not enough"), Replicas: &derr.ReplicaCount{ISR: 1, MinISR: 2}},
			connect.CodeFailedPrecondition, []proto.Message{&sluicev1.NotEnoughReplicas{IsrSize: 1, MinInsyncReplicas: 2}}},
		{"fenced transactional producer", &derr.Error{Kind: derr.InvalidProducerEpoch, Err: errors.New("fenced"),
			Producer: &derr.ProducerRefusal{Reason: derr.ProducerReasonFenced}, Txn: derr.TxnReasonProducerFenced},
			connect.CodeFailedPrecondition, []proto.Message{
				&sluicev1.ProducerError{Reason: sluicev1.ProducerError_REASON_PRODUCER_FENCED},
				&sluicev1.TransactionError{Reason: sluicev1.TransactionError_REASON_PRODUCER_FENCED}}},
		{"out of order", &derr.Error{Kind: derr.OutOfOrderSequenceNumber, Err: errors.New("gap"), Producer: &derr.ProducerRefusal{Reason: derr.ProducerReasonOutOfOrderSequence, ExpectedSequence: -1}},
			connect.CodeFailedPrecondition, []proto.Message{&sluicev1.ProducerError{Reason: sluicev1.ProducerError_REASON_OUT_OF_ORDER_SEQUENCE, ExpectedSequence: -1}}},
		{"rate quota", &derr.Error{Kind: derr.ThrottlingQuotaExceeded, Err: errors.New("over"), RetryAfter: 1500 * time.Millisecond, Quota: &derr.QuotaViolation{Tenant: "t-1", Limit: "produce_bytes_per_sec"}},
			connect.CodeResourceExhausted, []proto.Message{
				&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)},
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:t-1", Description: "produce_bytes_per_sec"}}}}},
		{"count quota", &derr.Error{Kind: derr.PolicyViolation, Err: errors.New("at the limit"), Quota: &derr.QuotaViolation{Tenant: "t-1", Limit: "topics"}},
			connect.CodeResourceExhausted, []proto.Message{&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:t-1", Description: "topics"}}}}},
		{"group", &derr.Error{Kind: derr.UnknownMemberID, Err: errors.New("who"), Group: derr.GroupReasonUnknownMember},
			connect.CodeNotFound, []proto.Message{&sluicev1.GroupError{Reason: sluicev1.GroupError_REASON_UNKNOWN_MEMBER}}},
		{"too large", &derr.Error{Kind: derr.MessageTooLarge, Err: errors.New("big"), TooLarge: &derr.SizeLimit{Bytes: 2000, Max: 1000}},
			connect.CodeInvalidArgument, []proto.Message{&sluicev1.BatchTooLarge{BatchBytes: 2000, MaxMessageBytes: 1000}}},
		{"out of range", &derr.Error{Kind: derr.OffsetOutOfRange, Err: errors.New("offset 9"), Range: &derr.OffsetRange{Offset: 9, LEO: 5}},
			connect.CodeOutOfRange, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := ToConnect(c.err)
			require.Equal(t, c.code, connect.CodeOf(err), "%v", err)
			var ce *connect.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, c.err.Error(), ce.Message())
			requireDetails(t, err, c.want...)
			require.ErrorIs(t, err, c.err, "the domain error stays in the chain")
			require.ErrorIs(t, err, c.err.Kind)
		})
	}
}

// TestToConnectOutermostDecides: a Connect error passes unchanged even
// around a domain error, and a domain error decides even around a
// Connect error (a peer's answer it was built from); anything else, and
// Internal, is left for the interceptor.
func TestToConnectOutermostDecides(t *testing.T) {
	inner := &derr.NotLeaderError{Leader: 2, Epoch: 1}
	outer := connect.NewError(connect.CodeUnavailable, fmt.Errorf("taking over: %w", inner))
	require.Same(t, outer, ToConnect(fmt.Errorf("x: %w", outer)))

	peer := connect.NewError(connect.CodeInternal, errors.New("object store down"))
	err := ToConnect(derr.New(derr.StorageUnavailable, "read offset 4 from the object store: %w", peer))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err))

	plain := errors.New("boom")
	require.Same(t, plain, ToConnect(plain))
	internal := derr.Wrap(derr.Internal, plain)
	require.Equal(t, error(internal), ToConnect(internal))
	require.NoError(t, ToConnect(nil))

	joined := errors.Join(plain, derr.New(derr.NotEnoughReplicas, "no"))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(ToConnect(joined)))
}

func TestFromConnect(t *testing.T) {
	require.NoError(t, FromConnect(nil))
	plain := errors.New("dial: refused")
	require.Same(t, plain, FromConnect(plain))

	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("stale partition epoch 0 (current 1)"))
	err := FromConnect(ce)
	require.ErrorIs(t, err, derr.FailedPrecondition)
	require.NotErrorIs(t, err, derr.InvalidUpdateVersion, "by type, never by the message")
	require.Equal(t, ce.Error(), err.Error(), "the peer's error is the cause")

	d, derrr := connect.NewErrorDetail(&sluicev1.StalePartitionEpoch{PartitionEpoch: 0, CurrentPartitionEpoch: 1})
	require.NoError(t, derrr)
	ce.AddDetail(d)
	require.ErrorIs(t, FromConnect(ce), derr.InvalidUpdateVersion)

	for _, c := range []struct {
		code connect.Code
		kind derr.Kind
	}{
		{connect.CodeUnimplemented, derr.UnsupportedVersion},
		{connect.CodeInvalidArgument, derr.InvalidRequest},
		{connect.CodeUnavailable, derr.Unavailable},
		{connect.CodeNotFound, derr.NotFound},
	} {
		k, ok := derr.KindOf(FromConnect(connect.NewError(c.code, errors.New("x"))))
		require.True(t, ok)
		require.Equal(t, c.kind, k)
	}
}

func TestFromAlterPartitionsError(t *testing.T) {
	cur := &sluicev1.PartitionAssignment{TopicId: "t", PartitionEpoch: 1}
	err := FromAlterPartitionsError(&sluicev1.AlterPartitionsError{Code: "failed_precondition", Message: "stale partition epoch 0 (current 1)", Current: cur,
		StalePartitionEpoch: &sluicev1.StalePartitionEpoch{CurrentPartitionEpoch: 1}})
	require.ErrorIs(t, err, derr.InvalidUpdateVersion)
	require.Equal(t, "failed_precondition: stale partition epoch 0 (current 1)", err.Error(), "as AlterPartition's error reads")

	err = FromAlterPartitionsError(&sluicev1.AlterPartitionsError{Code: "failed_precondition", Message: "stale partition epoch 0 (current 1)"})
	require.ErrorIs(t, err, derr.FailedPrecondition, "without the detail, the message says nothing")
	require.NotErrorIs(t, err, derr.InvalidUpdateVersion)
	require.ErrorIs(t, FromAlterPartitionsError(&sluicev1.AlterPartitionsError{Code: "invalid_argument"}), derr.InvalidRequest)
	require.ErrorIs(t, FromAlterPartitionsError(&sluicev1.AlterPartitionsError{Code: "what"}), derr.Unknown)

	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("not the leader"))
	require.Nil(t, CurrentPartition(ce))
	d, derrr := connect.NewErrorDetail(cur)
	require.NoError(t, derrr)
	ce.AddDetail(d)
	require.True(t, proto.Equal(cur, CurrentPartition(fmt.Errorf("alter: %w", ce))))
	require.Nil(t, CurrentPartition(errors.New("plain")))
}
