package kafka

import (
	"context"
	"net"
	"slices"
	"strconv"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/tenants"
)

// kafkaNode is a broker as Kafka clients reach it: its Kafka listener's
// advertised host and port. ok is false for a broker without one.
func kafkaNode(n cluster.Node) (host string, port int32, ok bool) {
	h, p, err := net.SplitHostPort(n.KafkaAddress)
	if err != nil {
		return "", 0, false
	}
	pn, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		return "", 0, false
	}
	return h, int32(pn), true
}

// endpoint is a broker's Kafka listener as answers list it (Metadata,
// DescribeCluster, and the leader hints of Produce and Fetch).
type endpoint struct {
	id   int32
	host string
	port int32
	rack *string // nil: none
}

// endpoints are the Kafka endpoints of the brokers named in ids, or of
// every broker when ids is nil, by id; brokers without a Kafka listener
// (or not in the view) are left out.
func endpoints(v *cluster.View, ids map[int32]bool) []endpoint {
	var out []endpoint
	for _, n := range cluster.SortedNodes(v) {
		if ids != nil && !ids[n.ID] {
			continue
		}
		host, port, ok := kafkaNode(n)
		if !ok {
			continue
		}
		e := endpoint{id: n.ID, host: host, port: port}
		if n.Rack != "" {
			e.rack = ptr(n.Rack)
		}
		out = append(out, e)
	}
	return out
}

// topicID is a topic's id as Kafka's 16 bytes (Sluice's ids are UUIDs).
func topicID(id string) [16]byte {
	u, err := uuid.Parse(id)
	if err != nil {
		return [16]byte{}
	}
	return u
}

// byTopicID finds the caller's topic of a Kafka topic id.
func byTopicID(v *cluster.View, tenantID string, id [16]byte) (*cluster.Topic, bool) {
	t, ok := v.ByID[uuid.UUID(id).String()]
	if !ok || t.TenantID != tenantID {
		return nil, false
	}
	return t, true
}

// leaderOf is a partition's leader as Kafka clients see it: -1 when it
// has none, or its broker has no Kafka listener in the view.
func leaderOf(v *cluster.View, pm cluster.Partition) int32 {
	if pm.Leader < 0 {
		return -1
	}
	if _, _, ok := kafkaNode(v.Brokers[pm.Leader]); !ok {
		return -1
	}
	return pm.Leader
}

func (c *conn) metadata(ctx context.Context, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	res := req.ResponseKind().(*kmsg.MetadataResponse)
	v := c.s.d.View()
	p, _ := tenants.PrincipalFrom(ctx)
	for _, e := range endpoints(v, nil) {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = e.id, e.host, e.port, e.rack
		res.Brokers = append(res.Brokers, b)
	}
	res.ClusterID = ptr(c.s.d.ClusterID)
	// Every broker serves the admin requests (it forwards them to the
	// control plane): the one asked names itself the controller.
	res.ControllerID = c.s.d.BrokerID
	var names []string
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		for name := range v.ByTenant[p.TenantID] {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	for _, rt := range req.Topics {
		var name string
		switch {
		case rt.Topic != nil:
			name = *rt.Topic
		case rt.TopicID != [16]byte{}:
			if t, ok := byTopicID(v, p.TenantID, rt.TopicID); ok {
				name = t.Name
			} else {
				mt := kmsg.NewMetadataResponseTopic()
				mt.TopicID, mt.ErrorCode = rt.TopicID, kerr.UnknownTopicID.Code
				res.Topics = append(res.Topics, mt)
				continue
			}
		}
		names = append(names, name)
	}
	for _, name := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = ptr(name)
		t, ok := v.Topic(p.TenantID, name)
		if !ok {
			mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if !v.Loaded {
				mt.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			res.Topics = append(res.Topics, mt)
			continue
		}
		mt.TopicID = topicID(t.ID)
		for _, pm := range t.Partitions {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition, mp.Leader, mp.LeaderEpoch = pm.Partition, leaderOf(v, pm), pm.LeaderEpoch
			mp.Replicas, mp.ISR = slices.Clone(pm.Replicas), slices.Clone(pm.ISR)
			if mp.Replicas == nil {
				mp.Replicas = []int32{}
			}
			if mp.ISR == nil {
				mp.ISR = []int32{}
			}
			for _, r := range pm.Replicas {
				if _, live := v.Brokers[r]; !live {
					mp.OfflineReplicas = append(mp.OfflineReplicas, r)
				}
			}
			if mp.Leader < 0 {
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
			}
			mt.Partitions = append(mt.Partitions, mp)
		}
		res.Topics = append(res.Topics, mt)
	}
	return res
}

func (c *conn) describeCluster(req *kmsg.DescribeClusterRequest) *kmsg.DescribeClusterResponse {
	res := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	v := c.s.d.View()
	res.ClusterID = c.s.d.ClusterID
	res.ControllerID = c.s.d.BrokerID
	res.EndpointType = 1 // brokers
	for _, e := range endpoints(v, nil) {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = e.id, e.host, e.port, e.rack
		res.Brokers = append(res.Brokers, b)
	}
	return res
}
