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

// allTxnRows are list --all's rows: txnRows with the tenant first.
func allTxnRows(ts []*sluicev1.TransactionDescription) [][]string {
	rows := txnRows(ts)
	for i, t := range ts {
		rows[i] = append([]string{t.GetTenantId()}, rows[i]...)
	}
	return rows
}

// operatorTxns lists transactions as the operator (OperatorService,
// every tenant's, or tenant's, or one id of tenant's).
func (a *app) operatorTxns(ctx context.Context, token, what, tenant, id string) ([]*sluicev1.TransactionDescription, error) {
	op, err := a.operator(token, what)
	if err != nil {
		return nil, err
	}
	res, err := op.ListTransactions(ctx, connect.NewRequest(&sluicev1.OperatorServiceListTransactionsRequest{TenantId: tenant, TransactionalId: id}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetTransactions(), nil
}

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

An operator lists every tenant's ids with list --all and describes one
with describe ID --tenant TENANT-ID, authenticated with the operator
credential (--operator-token or $SLUICE_OPERATOR_TOKEN) instead of an API
key: the control plane asks every broker.

Exit codes: 0 ok, 1 error, 2 usage, 3 unauthenticated or not allowed, 4
the transactional id does not exist.`,
	}

	var (
		listAll                  bool
		listTenant, listOperator string
		descTenant, descOperator string
	)

	list := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's transactional ids: state, producer, partitions",
		Long: `list shows each transactional id its coordinators know: its state, producer
id and epoch (bumped at every end of a transaction, and by each new
instance), the partitions of its current or last transaction, when that
began, and the broker coordinating it.

--all lists every tenant's ids instead, with a TENANT column (the tenant
id), sorted by tenant; --tenant TENANT-ID only that tenant's. Both act as
the operator (--operator-token or $SLUICE_OPERATOR_TOKEN) and fail when a
broker does not answer, since the list would be incomplete.

-o json prints the whole response; 64-bit numbers are strings there.`,
		Example: "  sluice txn list\n  sluice txn list -o json\n  SLUICE_OPERATOR_TOKEN=… sluice txn list --all\n  sluice txn list --tenant 7c9e6679-7425-40de-944b-e07fc1f90ae7 --operator-token \"$OP\"",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listAll || listTenant != "" {
				if listAll && listTenant != "" {
					return usageError{errors.New("choose one of --all and --tenant")}
				}
				what := "--all"
				if listTenant != "" {
					what = "--tenant"
				}
				all, err := a.operatorTxns(cmd.Context(), listOperator, what, listTenant, "")
				if err != nil {
					return err
				}
				if a.output == "json" {
					return printJSON(a.stdout, &sluicev1.OperatorServiceListTransactionsResponse{Transactions: all})
				}
				return table(a.stdout, append([]string{"TENANT"}, txnHeader...), allTxnRows(all))
			}
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

--tenant TENANT-ID describes that tenant's id as the operator
(--operator-token or $SLUICE_OPERATOR_TOKEN).

-o json prints the whole response; 64-bit numbers are strings there.`,
		Example: "  sluice txn describe orders-enricher-0\n  sluice txn describe orders-enricher-0 -o json\n  sluice txn describe orders-enricher-0 --tenant 7c9e6679-7425-40de-944b-e07fc1f90ae7 --operator-token \"$OP\"",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usageError{errors.New("transactional id must not be empty")}
			}
			if descTenant != "" {
				found, err := a.operatorTxns(cmd.Context(), descOperator, "--tenant", descTenant, args[0])
				if err != nil {
					return err
				}
				if len(found) == 0 {
					return connect.NewError(connect.CodeNotFound, fmt.Errorf("transactional id %q of tenant %s not found", args[0], descTenant))
				}
				if a.output == "json" {
					return printJSON(a.stdout, &sluicev1.DescribeTransactionResponse{Transaction: found[0]})
				}
				return describeTxn(a, found[0])
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
	list.Flags().BoolVar(&listAll, "all", false, "list every tenant's transactional ids, as the operator")
	list.Flags().StringVar(&listTenant, "tenant", "", "list this tenant's (a tenant id), as the operator")
	addOperatorToken(list.Flags(), &listOperator)
	describe.Flags().StringVar(&descTenant, "tenant", "", "describe the id of this tenant (a tenant id), as the operator")
	addOperatorToken(describe.Flags(), &descOperator)
	cmd.AddCommand(list, describe)
	return cmd
}

func describeTxn(a *app, t *sluicev1.TransactionDescription) error {
	groups := strings.Join(t.GetGroups(), ",")
	if groups == "" {
		groups = "-"
	}
	tenant := t.GetTenantId()
	if tenant == "" {
		tenant = "-"
	}
	return kv(a.stdout,
		"transactional id", t.GetTransactionalId(),
		"tenant", tenant,
		"state", fmtTxnState(t.GetState()),
		"producer id", strconv.FormatInt(t.GetProducerId(), 10),
		"epoch", strconv.Itoa(int(t.GetProducerEpoch())),
		"timeout", fmtDuration(time.Duration(t.GetTimeoutMs())*time.Millisecond),
		"partitions", fmtTxnPartitions(t.GetTopics()),
		"groups", groups,
		"started", fmtMillis(t.GetStartTimeMs()),
		"updated", fmtMillis(t.GetUpdateTimeMs()),
		"coordinator", fmt.Sprint(t.GetCoordinatorId()))
}
