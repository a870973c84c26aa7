package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// txnAdmin returns a TransactionService client (any broker forwards to
// the transactional id's coordinator) and a function that releases it.
func (a *app) txnAdmin(ctx context.Context) (sluicev1connect.TransactionServiceClient, func(), error) {
	c, err := a.sdkClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	ts, err := c.TransactionAdmin()
	if err != nil {
		c.Close()
		return nil, nil, sdkError{err}
	}
	return ts, func() { c.Close() }, nil
}

// fmtTxnState writes a TxnState without its prefix, as the table shows
// it: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
// CompleteAbort.
func fmtTxnState(s sluicev1.TxnState) string {
	switch s {
	case sluicev1.TxnState_TXN_STATE_EMPTY:
		return "Empty"
	case sluicev1.TxnState_TXN_STATE_ONGOING:
		return "Ongoing"
	case sluicev1.TxnState_TXN_STATE_PREPARE_COMMIT:
		return "PrepareCommit"
	case sluicev1.TxnState_TXN_STATE_PREPARE_ABORT:
		return "PrepareAbort"
	case sluicev1.TxnState_TXN_STATE_COMPLETE_COMMIT:
		return "CompleteCommit"
	case sluicev1.TxnState_TXN_STATE_COMPLETE_ABORT:
		return "CompleteAbort"
	}
	return "-"
}

// fmtMillis writes Unix milliseconds as a local time, "-" for 0.
func fmtMillis(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format(time.DateTime)
}

// fmtTxnPartitions writes a transaction's partitions as "orders:0,1
// audit:3", or "-".
func fmtTxnPartitions(tps []*sluicev1.TransactionPartitions) string {
	var parts []string
	for _, tp := range tps {
		if len(tp.GetPartitions()) > 0 {
			parts = append(parts, tp.GetTopic()+":"+fmtInts(tp.GetPartitions()))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// txnRows are list's table rows.
func txnRows(ts []*sluicev1.TransactionDescription) [][]string {
	rows := make([][]string, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, []string{t.GetTransactionalId(), fmtTxnState(t.GetState()), strconv.FormatInt(t.GetProducerId(), 10),
			strconv.Itoa(int(t.GetProducerEpoch())), fmtTxnPartitions(t.GetTopics()), fmtMillis(t.GetStartTimeMs()), strconv.Itoa(int(t.GetCoordinatorId()))})
	}
	return rows
}

var txnHeader = []string{"TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "EPOCH", "PARTITIONS", "STARTED", "COORDINATOR"}

func (a *app) txnCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "List and describe transactional producers",
		Long: `A transactional producer (the SDK's NewTransactionalProducer) writes records
to any partitions, and a consumer group's offsets, in transactions that
commit or abort whole. Its transactional id, scoped to the tenant, names it
across restarts; the broker leading the id's partition of the internal
__transaction_state topic coordinates it. See docs/sdk-transactions.md.

Each id has a state: Empty (no transaction open), Ongoing (one is open:
its partitions hold back read-committed consumers at its first record),
PrepareCommit or PrepareAbort (its markers are being written), then
CompleteCommit or CompleteAbort.

Exit codes: 0 ok, 1 error, 2 usage, 3 unauthenticated or not allowed, 4
the transactional id does not exist.`,
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's transactional ids: state, producer, partitions",
		Long: `list shows each transactional id its coordinators know: its state, producer
id and epoch (bumped at every end of a transaction, and by each new
instance), the partitions of its current or last transaction, when that
began, and the broker coordinating it.

-o json prints the whole response; 64-bit numbers are strings there.`,
		Example: "  sluice txn list\n  sluice txn list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, done, err := a.txnAdmin(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := ts.ListTransactions(cmd.Context(), connect.NewRequest(&sluicev1.ListTransactionsRequest{}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return table(a.stdout, txnHeader, txnRows(res.Msg.GetTransactions()))
		},
	}

	describe := &cobra.Command{
		Use:   "describe TRANSACTIONAL-ID",
		Short: "Show one transactional id: state, producer, partitions and groups",
		Long: `describe shows TRANSACTIONAL-ID's state, producer id and epoch, transaction
timeout, the partitions and consumer groups of its current (or last)
transaction, when that began and last changed, and the broker
coordinating it. Exit code 4 when no coordinator knows the id.

-o json prints the whole response; 64-bit numbers are strings there.`,
		Example: "  sluice txn describe orders-enricher-0\n  sluice txn describe orders-enricher-0 -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usageError{errors.New("transactional id must not be empty")}
			}
			ts, done, err := a.txnAdmin(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := ts.DescribeTransaction(cmd.Context(), connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: args[0]}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return describeTxn(a, res.Msg.GetTransaction())
		},
	}
	cmd.AddCommand(list, describe)
	return cmd
}

func describeTxn(a *app, t *sluicev1.TransactionDescription) error {
	groups := strings.Join(t.GetGroups(), ",")
	if groups == "" {
		groups = "-"
	}
	return kv(a.stdout,
		"transactional id", t.GetTransactionalId(),
		"state", fmtTxnState(t.GetState()),
		"producer id", strconv.FormatInt(t.GetProducerId(), 10),
		"epoch", strconv.Itoa(int(t.GetProducerEpoch())),
		"timeout", (time.Duration(t.GetTimeoutMs()) * time.Millisecond).String(),
		"partitions", fmtTxnPartitions(t.GetTopics()),
		"groups", groups,
		"started", fmtMillis(t.GetStartTimeMs()),
		"updated", fmtMillis(t.GetUpdateTimeMs()),
		"coordinator", fmt.Sprint(t.GetCoordinatorId()))
}
