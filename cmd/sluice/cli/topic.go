package cli

import (
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/topicconfig"
)

// topicConfigKeys are the --config keys, named as in Kafka.
var topicConfigKeys = topicconfig.Keys

// parseTopicConfig turns "key=value" pairs into a TopicConfig with only
// those fields set.
func parseTopicConfig(pairs []string) (*sluicev1.TopicConfig, error) {
	c := &sluicev1.TopicConfig{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, usageError{fmt.Errorf("--config %q: want key=value", p)}
		}
		if err := topicconfig.Set(c, k, v); err != nil {
			return nil, usageError{fmt.Errorf("--config %w", err)}
		}
	}
	return c, nil
}

func configPairs(c *sluicev1.TopicConfig) []string {
	return []string{
		"retention.ms", fmt.Sprintf("%d (%s)", c.GetRetentionMs(), fmtMsDuration(c.GetRetentionMs())),
		"retention.bytes", fmt.Sprint(c.GetRetentionBytes()),
		"local.retention.ms", fmt.Sprint(c.GetLocalRetentionMs()),
		"local.retention.bytes", fmt.Sprint(c.GetLocalRetentionBytes()),
		"max.message.bytes", fmt.Sprint(c.GetMaxMessageBytes()),
		"min.insync.replicas", fmt.Sprint(c.GetMinInsyncReplicas()),
		"cleanup.policy", c.GetCleanupPolicy(),
		"unclean.leader.election.enable", fmt.Sprint(c.GetUncleanLeaderElectionEnable()),
		"message.timestamp.type", c.GetMessageTimestampType(),
	}
}

func fmtMsDuration(ms int64) string {
	if ms < 0 {
		return "unlimited"
	}
	return fmtDuration(time.Duration(ms) * time.Millisecond)
}

func (a *app) printTopic(t *sluicev1.Topic, parts []*sluicev1.PartitionInfo) error {
	pairs := []string{"name", t.GetName(), "id", t.GetId(), "partitions", fmt.Sprint(t.GetPartitionCount()),
		"replication factor", fmt.Sprint(t.GetReplicationFactor()), "created", fmtTime(t.GetCreateTime())}
	pairs = append(pairs, configPairs(t.GetConfig())...)
	if err := kv(a.stdout, pairs...); err != nil {
		return err
	}
	if len(parts) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	var rows [][]string
	for _, p := range parts {
		rows = append(rows, []string{fmt.Sprint(p.GetPartition()), fmt.Sprint(p.GetLeader()), fmt.Sprint(p.GetLeaderEpoch()), fmtInts(p.GetReplicas()), fmtInts(p.GetIsr())})
	}
	return table(a.stdout, []string{"PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR"}, rows)
}

func (a *app) topicCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "topic", Short: "Create, list, describe, alter and delete topics"}

	var partitions, rf int32
	var configs []string
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Example: `  sluice topic create orders --partitions 6
  sluice topic create audit --partitions 1 --replication-factor 3 --config retention.ms=86400000`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := parseTopicConfig(configs)
			if err != nil {
				return err
			}
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.topic.CreateTopic(cmd.Context(), connect.NewRequest(&sluicev1.CreateTopicRequest{
				Name: args[0], PartitionCount: partitions, ReplicationFactor: rf, Config: cfg,
			}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printTopic(res.Msg.GetTopic(), res.Msg.GetPartitions())
		},
	}
	create.Flags().Int32VarP(&partitions, "partitions", "p", 1, "number of partitions")
	create.Flags().Int32VarP(&rf, "replication-factor", "r", 0, "replicas per partition; 0 uses the server default")
	create.Flags().StringArrayVarP(&configs, "config", "c", nil, "topic config key=value (repeatable): "+strings.Join(topicConfigKeys, ", "))

	list := &cobra.Command{
		Use:   "list",
		Short: "List topics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.topic.ListTopics(cmd.Context(), connect.NewRequest(&sluicev1.ListTopicsRequest{}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			var rows [][]string
			for _, t := range res.Msg.GetTopics() {
				rows = append(rows, []string{t.GetName(), fmt.Sprint(t.GetPartitionCount()), fmt.Sprint(t.GetReplicationFactor()), fmtMsDuration(t.GetConfig().GetRetentionMs()), t.GetId()})
			}
			return table(a.stdout, []string{"NAME", "PARTITIONS", "RF", "RETENTION", "ID"}, rows)
		},
	}
	describe := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's config and its partitions' leaders and ISR",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.topic.DescribeTopic(cmd.Context(), connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printTopic(res.Msg.GetTopic(), res.Msg.GetPartitions())
		},
	}
	var alterConfigs []string
	var alterPartitions int32
	alter := &cobra.Command{
		Use:   "alter NAME",
		Short: "Change topic config, or add partitions",
		Long: `Change a topic's config (--config: only the keys given), or raise its partition
count (--partitions: the new total). Partitions can be added, never removed.
After adding partitions, records with keys go to other partitions than before
(hash(key) mod the new count), so the order of a key's records does not span
the change. The two are separate changes: give one or the other.`,
		Example: `  sluice topic alter orders --config retention.ms=172800000 --config max.message.bytes=524288
  sluice topic alter orders --partitions 12`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			grow := cmd.Flags().Changed("partitions")
			switch {
			case grow && len(alterConfigs) > 0:
				return usageError{fmt.Errorf("--partitions and --config are separate changes (adding partitions cannot be undone, and the two would not be applied together): run topic alter once for each")}
			case grow:
				return a.addPartitions(cmd, args[0], alterPartitions)
			case len(alterConfigs) == 0:
				return usageError{fmt.Errorf("give --config key=value to change config, or --partitions N to add partitions")}
			}
			cfg, err := parseTopicConfig(alterConfigs)
			if err != nil {
				return err
			}
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.topic.UpdateTopicConfig(cmd.Context(), connect.NewRequest(&sluicev1.UpdateTopicConfigRequest{Name: args[0], Config: cfg}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printTopic(res.Msg.GetTopic(), nil)
		},
	}
	alter.Flags().StringArrayVarP(&alterConfigs, "config", "c", nil, "topic config key=value to change (repeatable): "+strings.Join(topicConfigKeys, ", "))
	alter.Flags().Int32VarP(&alterPartitions, "partitions", "p", 0, "raise the partition count to this new total (partitions are never removed; keyed records then map to other partitions)")
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic and its data",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.topic.DeleteTopic(cmd.Context(), connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: args[0]}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			_, err = fmt.Fprintf(a.stdout, "deleted topic %s (%s)\n", res.Msg.GetTopic().GetName(), res.Msg.GetTopic().GetId())
			return err
		},
	}
	cmd.AddCommand(create, list, describe, alter, del)
	return cmd
}

// addPartitions raises the topic's partition count to n and shows the
// topic with every partition, the new ones included.
func (a *app) addPartitions(cmd *cobra.Command, name string, n int32) error {
	if n < 1 {
		return usageError{fmt.Errorf("--partitions %d: give the new total partition count, more than the topic has now", n)}
	}
	c, err := a.authenticated(cmd.Context())
	if err != nil {
		return err
	}
	res, err := c.topic.CreatePartitions(cmd.Context(), connect.NewRequest(&sluicev1.CreatePartitionsRequest{Name: name, PartitionCount: n}))
	if err != nil {
		return err
	}
	if a.output == "json" {
		return printJSON(a.stdout, res.Msg)
	}
	// As Kafka's kafka-topics --alter --partitions warns.
	fmt.Fprintf(a.stderr, "note: records with keys now map to other partitions (hash(key) mod %d); a key's order does not span the change\n", res.Msg.GetTopic().GetPartitionCount())
	return a.printTopic(res.Msg.GetTopic(), res.Msg.GetPartitions())
}
