package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

// completeTimeout bounds the server calls of one completion: a shell waits
// for it on every Tab.
const completeTimeout = 3 * time.Second

// Commands whose first argument names a topic or a group, and commands
// whose --topic or --group flag does.
var (
	topicArgCommands  = []string{"topic describe", "topic alter", "topic delete", "produce", "consume"}
	groupArgCommands  = []string{"group describe", "group lag", "group reset-offsets", "group delete-offsets", "group delete"}
	topicFlagCommands = []string{"group reset-offsets", "group delete-offsets"}
	groupFlagCommands = []string{"consume", "alerts list"}
	txnArgCommands    = []string{"txn describe"}
	invoiceArgCommand = "invoice get"
	tenantArgCommand  = "operator tenant update" // tenant names, with the operator credential
	planFlagCommands  = []string{"operator tenant update", "operator prices get", "operator prices set"}
)

// staticFlagValues are flags whose values are a fixed list, by command.
var staticFlagValues = map[string]map[string]func() []string{
	"usage":                  {"by": func() []string { return []string{"hour", "day"} }, "dimension": dimensionNames},
	"operator tenant update": {"status": func() []string { return []string{"active", "suspended"} }, "clear-override": overrideFlagNames},
	"operator prices set":    {"price": dimensionPrefixes, "free": dimensionPrefixes},
}

func overrideFlagNames() []string {
	var out []string
	for _, l := range limit.All() {
		out = append(out, limitFlag(l))
	}
	return out
}

// dimensionPrefixes are "ingress=", "egress=" …: the start of a
// DIMENSION=VALUE flag value.
func dimensionPrefixes() []string {
	var out []string
	for _, n := range dimensionNames() {
		out = append(out, n+"=")
	}
	return out
}

// registerCompletions makes shell completion (sluice completion bash|zsh|
// fish|powershell) offer the tenant's topic, group and transactional id
// names where a command takes one, asking the server with the profile's credentials.
// Without a profile, or with the server down, it offers nothing and says
// nothing: completion must never print errors into a command line.
func (a *app) registerCompletions(root *cobra.Command) {
	walk := func(fn func(path string, c *cobra.Command)) {
		var visit func(c *cobra.Command)
		visit = func(c *cobra.Command) {
			fn(strings.TrimPrefix(c.CommandPath(), root.Name()+" "), c)
			for _, sub := range c.Commands() {
				visit(sub)
			}
		}
		visit(root)
	}
	walk(func(path string, c *cobra.Command) {
		switch {
		case slices.Contains(topicArgCommands, path):
			c.ValidArgsFunction = a.completeFirstArg(a.topicNames)
		case slices.Contains(groupArgCommands, path):
			c.ValidArgsFunction = a.completeFirstArg(a.groupNames)
		case slices.Contains(txnArgCommands, path):
			c.ValidArgsFunction = a.completeFirstArg(a.txnNames)
		}
		if slices.Contains(topicFlagCommands, path) {
			_ = c.RegisterFlagCompletionFunc("topic", a.completeFlag(a.topicNames))
		}
		if slices.Contains(groupFlagCommands, path) {
			_ = c.RegisterFlagCompletionFunc("group", a.completeFlag(a.groupNames))
		}
		switch path {
		case invoiceArgCommand:
			c.ValidArgsFunction = a.completeFirstArg(a.invoiceIDs)
			_ = c.RegisterFlagCompletionFunc("period", a.completeFlag(a.invoicePeriods))
		case tenantArgCommand:
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return a.complete(cmd, func(ctx context.Context) ([]string, error) {
					tok, _ := cmd.Flags().GetString("operator-token")
					return a.tenantNames(ctx, tok)
				}, toComplete)
			}
		}
		if slices.Contains(planFlagCommands, path) {
			_ = c.RegisterFlagCompletionFunc("plan", staticValues(tenants.Plans))
		}
		for flag, values := range staticFlagValues[path] {
			directive := cobra.ShellCompDirectiveNoFileComp
			if flag == "price" || flag == "free" {
				directive |= cobra.ShellCompDirectiveNoSpace // the value follows the '='
			}
			_ = c.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return withPrefix(values(), toComplete), directive
			})
		}
	})
}

// staticValues completes a flag from a fixed list.
func staticValues(values func() []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return withPrefix(values(), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

func withPrefix(values []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, v := range values {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// completeFirstArg completes a command's one positional argument with the
// names list returns.
func (a *app) completeFirstArg(list func(context.Context) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.complete(cmd, list, toComplete)
	}
}

// completeFlag completes a flag's value with the names list returns.
func (a *app) completeFlag(list func(context.Context) ([]string, error)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return a.complete(cmd, list, toComplete)
	}
}

// complete asks the server for names starting with prefix; any failure is
// no completion.
func (a *app) complete(cmd *cobra.Command, list func(context.Context) ([]string, error), prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	// Completion does not run the root's PersistentPreRunE: read the
	// $SLUICE_* variables (--profile, --endpoint, --api-key) here.
	if applyEnv(cmd) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completeTimeout)
	defer cancel()
	names, err := list(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// topicNames lists the tenant's topics.
func (a *app) topicNames(ctx context.Context) ([]string, error) {
	c, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	res, err := c.topic.ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.Msg.GetTopics()))
	for _, t := range res.Msg.GetTopics() {
		names = append(names, t.GetName())
	}
	slices.Sort(names)
	return names, nil
}

// groupNames lists the tenant's consumer groups.
func (a *app) groupNames(ctx context.Context) ([]string, error) {
	gs, done, err := a.groupAdmin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := gs.ListGroups(ctx, connect.NewRequest(&sluicev1.ListGroupsRequest{}))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.Msg.GetGroups()))
	for _, g := range res.Msg.GetGroups() {
		names = append(names, g.GetGroup())
	}
	slices.Sort(names)
	return names, nil
}

// txnNames lists the tenant's transactional ids.
func (a *app) txnNames(ctx context.Context) ([]string, error) {
	ts, done, err := a.txnAdmin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := ts.ListTransactions(ctx, connect.NewRequest(&sluicev1.ListTransactionsRequest{}))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.Msg.GetTransactions()))
	for _, t := range res.Msg.GetTransactions() {
		names = append(names, t.GetTransactionalId())
	}
	slices.Sort(names)
	return names, nil
}

// invoiceIDs lists the tenant's invoice ids, newest first.
func (a *app) invoiceIDs(ctx context.Context) ([]string, error) {
	return a.invoiceField(ctx, (*sluicev1.Invoice).GetId)
}

// invoicePeriods lists the periods of the tenant's invoices, newest first.
func (a *app) invoicePeriods(ctx context.Context) ([]string, error) {
	return a.invoiceField(ctx, (*sluicev1.Invoice).GetPeriod)
}

func (a *app) invoiceField(ctx context.Context, field func(*sluicev1.Invoice) string) ([]string, error) {
	c, err := a.authenticated(ctx)
	if err != nil {
		return nil, err
	}
	res, err := listInvoices(ctx, c)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(res.GetInvoices()))
	for _, inv := range res.GetInvoices() {
		out = append(out, field(inv))
	}
	return out, nil
}

// tenantNames lists every tenant's name, with the operator credential.
func (a *app) tenantNames(ctx context.Context, token string) ([]string, error) {
	op, err := a.operator(token, "completion")
	if err != nil {
		return nil, err
	}
	ts, err := listAllTenants(ctx, op)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ts))
	for _, t := range ts {
		names = append(names, t.GetName())
	}
	slices.Sort(names)
	return names, nil
}
