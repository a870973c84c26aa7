// Package topicconfig names a topic's configs as Kafka does
// (retention.ms, cleanup.policy, ...) and converts them to and from the
// API's TopicConfig: what the CLI's --config flags and the Kafka
// listener's CreateTopics, DescribeConfigs and IncrementalAlterConfigs
// take and show.
package topicconfig

import (
	"fmt"
	"strconv"
	"strings"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Keys are the configs a topic has, named as in Kafka.
var Keys = []string{"retention.ms", "retention.bytes", "local.retention.ms", "local.retention.bytes", "max.message.bytes", "min.insync.replicas", "cleanup.policy", "unclean.leader.election.enable", "message.timestamp.type"}

// Set sets config key of c to value (its text, as Kafka gives it); an
// unknown key or a value that does not parse is an error naming it.
func Set(c *sluicev1.TopicConfig, key, value string) error {
	i64 := func() (*int64, error) {
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not an integer", key, value)
		}
		return &n, nil
	}
	i32 := func() (*int32, error) {
		n, err := strconv.ParseInt(value, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a 32-bit integer", key, value)
		}
		x := int32(n)
		return &x, nil
	}
	var err error
	switch key {
	case "retention.ms":
		c.RetentionMs, err = i64()
	case "retention.bytes":
		c.RetentionBytes, err = i64()
	case "local.retention.ms":
		c.LocalRetentionMs, err = i64()
	case "local.retention.bytes":
		c.LocalRetentionBytes, err = i64()
	case "max.message.bytes":
		c.MaxMessageBytes, err = i32()
	case "min.insync.replicas":
		c.MinInsyncReplicas, err = i32()
	case "cleanup.policy":
		c.CleanupPolicy = &value
	case "unclean.leader.election.enable":
		b, perr := strconv.ParseBool(value)
		if perr != nil {
			return fmt.Errorf("%s: %q is not true or false", key, value)
		}
		c.UncleanLeaderElectionEnable = &b
	case "message.timestamp.type":
		c.MessageTimestampType = &value
	default:
		return fmt.Errorf("unknown key %q; Sluice's topics have: %s", key, strings.Join(Keys, ", "))
	}
	return err
}

// Values are c's configs as Kafka shows them, in Keys' order.
func Values(c *sluicev1.TopicConfig) [][2]string {
	return [][2]string{
		{"retention.ms", fmt.Sprint(c.GetRetentionMs())},
		{"retention.bytes", fmt.Sprint(c.GetRetentionBytes())},
		{"local.retention.ms", fmt.Sprint(c.GetLocalRetentionMs())},
		{"local.retention.bytes", fmt.Sprint(c.GetLocalRetentionBytes())},
		{"max.message.bytes", fmt.Sprint(c.GetMaxMessageBytes())},
		{"min.insync.replicas", fmt.Sprint(c.GetMinInsyncReplicas())},
		{"cleanup.policy", c.GetCleanupPolicy()},
		{"unclean.leader.election.enable", fmt.Sprint(c.GetUncleanLeaderElectionEnable())},
		{"message.timestamp.type", c.GetMessageTimestampType()},
	}
}
