package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// completeTimeout bounds the server calls of one completion: a shell waits
// for it on every Tab.
const completeTimeout = 3 * time.Second

// Commands whose first argument names a topic or a group, and commands
// whose --topic or --group flag does.
var (
	topicArgCommands  = []string{"topic describe", "topic alter", "topic delete", "produce", "consume"}
	groupArgCommands  = []string{"group describe", "group lag", "group reset-offsets", "group delete"}
	topicFlagCommands = []string{"group reset-offsets"}
	groupFlagCommands = []string{"consume", "alerts list"}
	txnArgCommands    = []string{"txn describe"}
)

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
	})
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
