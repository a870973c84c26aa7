package kafka

import (
	"context"
	"net/http"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/derr"
)

// Admin is the control plane's topic administration, called with the
// session's credential (h) and the tenant's quotas and limits, as the
// Connect API's TopicService; configs are named as Kafka names them
// (retention.ms, cleanup.policy, ...). Errors are domain errors.
type Admin interface {
	CreateTopic(ctx context.Context, h http.Header, name string, partitions, replicationFactor int32, configs map[string]string) error
	DeleteTopic(ctx context.Context, h http.Header, name string) error
	CreatePartitions(ctx context.Context, h http.Header, name string, count int32) error
	// TopicConfigs are a topic's configs that Sluice has, every one with
	// its value (defaults included).
	TopicConfigs(ctx context.Context, h http.Header, name string) ([]Config, error)
	// AlterTopicConfigs sets configs (a nil value resets one to its
	// default).
	AlterTopicConfigs(ctx context.Context, h http.Header, name string, set map[string]*string) error
}

// Config is a topic config's value.
type Config struct {
	Name, Value string
	// Default: the value is the default, not set on the topic.
	Default bool
	// Sensitive, ReadOnly as Kafka's DescribeConfigs.
	ReadOnly bool
}

var errNoAdmin = derr.New(derr.UnsupportedVersion, "topic administration is not served on this listener")

func (c *conn) admin() (Admin, error) {
	if c.s.d.Admin == nil {
		return nil, errNoAdmin
	}
	return c.s.d.Admin, nil
}

func (c *conn) createTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) *kmsg.CreateTopicsResponse {
	res := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	a, aerr := c.admin()
	for _, rt := range req.Topics {
		tr := kmsg.NewCreateTopicsResponseTopic()
		tr.Topic = rt.Topic
		tr.NumPartitions, tr.ReplicationFactor = -1, -1
		err := aerr
		switch {
		case err != nil:
		case len(rt.ReplicaAssignment) > 0:
			err = derr.New(derr.InvalidRequest, "manual replica assignment is not supported: Sluice places replicas itself (give num_partitions and replication_factor)")
		case req.ValidateOnly:
			err = derr.New(derr.InvalidRequest, "validate_only is not supported: create the topic, or check it with a dry run of your own")
		default:
			configs := map[string]string{}
			for _, kv := range rt.Configs {
				if kv.Value != nil {
					configs[kv.Name] = *kv.Value
				}
			}
			parts, rf := rt.NumPartitions, rt.ReplicationFactor
			if parts < 0 {
				parts = 0 // the control plane's default
			}
			if rf < 0 {
				rf = 0
			}
			err = a.CreateTopic(ctx, c.sess.headers(), rt.Topic, parts, int32(rf), configs)
		}
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = adminError(err)
		}
		res.Topics = append(res.Topics, tr)
	}
	return res
}

func (c *conn) deleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) *kmsg.DeleteTopicsResponse {
	res := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	a, aerr := c.admin()
	names := req.TopicNames
	ids := make([][16]byte, len(names))
	for _, t := range req.Topics {
		name := ""
		if t.Topic != nil {
			name = *t.Topic
		} else if tp, ok := byTopicID(c.s.d.View(), c.sess.tenantID, t.TopicID); ok {
			name = tp.Name
		}
		names = append(names, name)
		ids = append(ids, t.TopicID)
	}
	for i, name := range names {
		tr := kmsg.NewDeleteTopicsResponseTopic()
		tr.Topic, tr.TopicID = ptr(name), ids[i]
		err := aerr
		if err == nil {
			if name == "" {
				err = derr.New(derr.UnknownTopicOrPartition, "unknown topic id")
			} else {
				err = a.DeleteTopic(ctx, c.sess.headers(), name)
			}
		}
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = adminError(err)
		}
		res.Topics = append(res.Topics, tr)
	}
	return res
}

func (c *conn) createPartitions(ctx context.Context, req *kmsg.CreatePartitionsRequest) *kmsg.CreatePartitionsResponse {
	res := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	a, aerr := c.admin()
	for _, rt := range req.Topics {
		tr := kmsg.NewCreatePartitionsResponseTopic()
		tr.Topic = rt.Topic
		err := aerr
		switch {
		case err != nil:
		case len(rt.Assignment) > 0:
			err = derr.New(derr.InvalidRequest, "manual replica assignment is not supported: Sluice places replicas itself")
		case req.ValidateOnly:
			err = derr.New(derr.InvalidRequest, "validate_only is not supported")
		default:
			err = a.CreatePartitions(ctx, c.sess.headers(), rt.Topic, rt.Count)
		}
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = adminError(err)
		}
		res.Topics = append(res.Topics, tr)
	}
	return res
}

// Kafka's config resource types.
const (
	resourceTopic  = 2
	resourceBroker = 4
)

func (c *conn) describeConfigs(ctx context.Context, req *kmsg.DescribeConfigsRequest) *kmsg.DescribeConfigsResponse {
	res := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	a, aerr := c.admin()
	for _, rr := range req.Resources {
		rs := kmsg.NewDescribeConfigsResponseResource()
		rs.ResourceType, rs.ResourceName = rr.ResourceType, rr.ResourceName
		switch rr.ResourceType {
		case resourceBroker:
			// A broker's settings are the operator's: none are shown
			// to tenants.
			rs.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
		case resourceTopic:
			err := aerr
			var cfgs []Config
			if err == nil {
				cfgs, err = a.TopicConfigs(ctx, c.sess.headers(), rr.ResourceName)
			}
			if err != nil {
				rs.ErrorCode, rs.ErrorMessage = adminError(err)
				break
			}
			want := map[string]bool{}
			for _, k := range rr.ConfigNames {
				want[k] = true
			}
			rs.Configs = []kmsg.DescribeConfigsResponseResourceConfig{}
			for _, cf := range cfgs {
				if rr.ConfigNames != nil && !want[cf.Name] {
					continue
				}
				rc := kmsg.NewDescribeConfigsResponseResourceConfig()
				rc.Name, rc.Value, rc.ReadOnly, rc.IsDefault = cf.Name, ptr(cf.Value), cf.ReadOnly, cf.Default
				rc.Source = kmsg.ConfigSourceDynamicTopicConfig
				if cf.Default {
					rc.Source = kmsg.ConfigSourceDefaultConfig
				}
				rs.Configs = append(rs.Configs, rc)
			}
		default:
			rs.ErrorCode = kerr.InvalidRequest.Code
			rs.ErrorMessage = ptr("only topic (2) and broker (4) resources are described")
		}
		res.Resources = append(res.Resources, rs)
	}
	return res
}

func (c *conn) incrementalAlterConfigs(ctx context.Context, req *kmsg.IncrementalAlterConfigsRequest) *kmsg.IncrementalAlterConfigsResponse {
	res := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	a, aerr := c.admin()
	for _, rr := range req.Resources {
		rs := kmsg.NewIncrementalAlterConfigsResponseResource()
		rs.ResourceType, rs.ResourceName = rr.ResourceType, rr.ResourceName
		err := aerr
		set := map[string]*string{}
		for _, cf := range rr.Configs {
			switch cf.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				if cf.Value == nil {
					err = derr.New(derr.InvalidRequest, "config %s: SET without a value", cf.Name)
				}
				set[cf.Name] = cf.Value
			case kmsg.IncrementalAlterConfigOpDelete:
				set[cf.Name] = nil
			default:
				err = derr.New(derr.InvalidRequest, "config %s: only SET and DELETE apply to Sluice's configs (no list values)", cf.Name)
			}
		}
		switch {
		case err != nil:
		case rr.ResourceType != resourceTopic:
			err = derr.New(derr.ClusterAuthorizationFailed, "only topic configs can be altered by a tenant")
		case req.ValidateOnly:
			err = derr.New(derr.InvalidRequest, "validate_only is not supported")
		default:
			err = a.AlterTopicConfigs(ctx, c.sess.headers(), rr.ResourceName, set)
		}
		if err != nil {
			rs.ErrorCode, rs.ErrorMessage = adminError(err)
		}
		res.Resources = append(res.Resources, rs)
	}
	return res
}

// adminError is an admin answer's code (adminCode) and message for err.
func adminError(err error) (int16, *string) { return adminCode(err), errorMessage(err) }

// adminCode is an admin answer's code: Kafka's admin codes where a kind
// has one of its own (an existing topic, an unknown config, a limit).
func adminCode(err error) int16 {
	k, _ := derr.KindOf(derr.Outermost(err, nil))
	switch k {
	case derr.AlreadyExists:
		return kerr.TopicAlreadyExists.Code
	case derr.NotFound:
		return kerr.UnknownTopicOrPartition.Code
	case derr.InvalidRequest:
		return kerr.InvalidConfig.Code
	}
	return errorCode(err, atRequest)
}
