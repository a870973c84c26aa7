package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func TestCLITxnRows(t *testing.T) {
	t.Parallel()
	rows := txnRows([]*sluicev1.TransactionDescription{
		{TransactionalId: "enrich-0", State: sluicev1.TxnState_TXN_STATE_ONGOING, ProducerId: 4001, ProducerEpoch: 3,
			Topics: []*sluicev1.TransactionPartitions{{Topic: "out", Partitions: []int32{0, 2}}, {Topic: "audit", Partitions: []int32{1}}}, CoordinatorId: 2},
		{TransactionalId: "idle", State: sluicev1.TxnState_TXN_STATE_EMPTY, ProducerId: 9, CoordinatorId: 1},
	})
	require.Equal(t, [][]string{
		{"enrich-0", "Ongoing", "4001", "3", "out:0,2 audit:1", "-", "2"},
		{"idle", "Empty", "9", "0", "-", "-", "1"},
	}, rows)
	require.Equal(t, [][]string{{"t-1", "idle", "Empty", "9", "0", "-", "-", "1"}},
		allTxnRows([]*sluicev1.TransactionDescription{{TenantId: "t-1", TransactionalId: "idle", State: sluicev1.TxnState_TXN_STATE_EMPTY, ProducerId: 9, CoordinatorId: 1}}))
	for s, want := range map[sluicev1.TxnState]string{
		sluicev1.TxnState_TXN_STATE_PREPARE_COMMIT: "PrepareCommit", sluicev1.TxnState_TXN_STATE_PREPARE_ABORT: "PrepareAbort",
		sluicev1.TxnState_TXN_STATE_COMPLETE_COMMIT: "CompleteCommit", sluicev1.TxnState_TXN_STATE_COMPLETE_ABORT: "CompleteAbort",
		sluicev1.TxnState_TXN_STATE_UNSPECIFIED: "-",
	} {
		require.Equal(t, want, fmtTxnState(s))
	}
}

func TestCLITxnDescribeTable(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	a := &app{stdout: &out}
	require.NoError(t, describeTxn(a, &sluicev1.TransactionDescription{
		TransactionalId: "enrich-0", State: sluicev1.TxnState_TXN_STATE_COMPLETE_COMMIT, ProducerId: 4001, ProducerEpoch: 4,
		TimeoutMs: 60000, Topics: []*sluicev1.TransactionPartitions{{Topic: "out", Partitions: []int32{1}}}, Groups: []string{"enricher"}, CoordinatorId: 3,
	}))
	got := out.String()
	for _, want := range []string{"transactional id: enrich-0", "tenant:           -", "state:            CompleteCommit", "epoch:            4",
		"timeout:          1m", "partitions:       out:1", "groups:           enricher", "started:          -", "coordinator:      3"} {
		require.Contains(t, got, want)
	}
}

// TestCLITxnUsage: bad transaction and isolation input is a usage error
// (exit 2) before any request is sent (the endpoint does not exist).
func TestCLITxnUsage(t *testing.T) {
	t.Parallel()
	cfg := t.TempDir() + "/config.json"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"txn", "describe"}, "accepts 1 arg(s)"},
		{[]string{"txn", "describe", "a", "b"}, "accepts 1 arg(s)"},
		{[]string{"txn", "describe", ""}, "transactional id must not be empty"},
		{[]string{"txn", "list", "x"}, "unknown command"},
		{[]string{"txn", "abort"}, "unknown command"},
		{[]string{"txn", "list", "--all"}, "--all acts as the operator: pass --operator-token or $SLUICE_OPERATOR_TOKEN"},
		{[]string{"txn", "list", "--tenant", "t"}, "--tenant acts as the operator"},
		{[]string{"txn", "list", "--all", "--tenant", "t", "--operator-token", "x"}, "choose one of --all and --tenant"},
		{[]string{"txn", "describe", "job", "--tenant", "t"}, "--tenant acts as the operator"},
		{[]string{"consume", "orders", "--isolation", "serializable"}, `--isolation "serializable": choose read-committed or read-uncommitted`},
		{[]string{"consume", "orders", "--group", "g", "--isolation", "committed"}, `--isolation "committed"`},
		{[]string{"produce", "orders", "--value", "x", "--transaction-timeout", "5s"}, "--transaction-timeout applies only with --transactional-id"},
		{[]string{"produce", "orders", "--value", "x", "--transactional-id", "t", "--acks", "1"}, "--transactional-id needs --acks all and idempotence"},
		{[]string{"produce", "orders", "--value", "x", "--transactional-id", "t", "--idempotence=false"}, "--transactional-id needs --acks all"},
		{[]string{"produce", "orders", "--value", "x", "--transactional-id", "t", "--transaction-timeout", "-1s"}, "--transaction-timeout must not be negative"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--cli-config", cfg, "--endpoint", "http://127.0.0.1:1", "--api-key", "slk_x"}, tc.args...)
		code := Execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, ExitUsage, code, "%q: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%q", tc.args)
	}
}
