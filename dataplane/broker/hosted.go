package broker

import (
	"context"

	"github.com/sluicemq/sluice/dataplane/partition"
)

// hosted is a coordinator this broker runs on one partition of an internal
// topic that it leads (a group coordinator on an offsets partition, a
// transaction coordinator on a transaction-state partition), made for one
// leader epoch on one replica.
type hosted interface {
	Epoch() int32
	Current() bool
	Load(context.Context) error
	replica() *partition.Replica
}

func (c *groupCoordinator) replica() *partition.Replica { return c.p }
func (c *txnCoordinator) replica() *partition.Replica   { return c.p }

// hostedAt returns the loaded coordinator of partition pm of internal topic
// t, kept in m (guarded by b.mu): the one made for pm's leader epoch on
// this broker's replica, else a new one from mk. It answers NotLeader when
// this broker does not lead the partition, and Unavailable while it is
// still taking it over.
func hostedAt[C hosted](ctx context.Context, b *Broker, m map[partKey]C, t *topicMeta, pm partMeta, mk func(p *partition.Replica, leaderEpoch int32) C) (C, error) {
	var none C
	if pm.leader != b.cfg.ID {
		return none, b.notLeader(pm)
	}
	p := b.partition(t.id, pm.partition)
	if p == nil {
		return none, b.notLeader(pm)
	}
	k := partKey{t.id, pm.partition}
	b.mu.Lock()
	c, ok := m[k]
	if !ok || c.Epoch() != pm.leaderEpoch || c.replica() != p {
		c = mk(p, pm.leaderEpoch)
		m[k] = c
	}
	b.mu.Unlock()
	if err := c.Load(ctx); err != nil {
		return none, b.takingOver(err)
	}
	return c, nil
}

// localHosted returns the loaded coordinators (at) of every partition of
// the internal topic that this broker leads; errNoTopic before the topic
// exists.
func localHosted[C hosted](ctx context.Context, b *Broker, topic string, errNoTopic error, at func(context.Context, *topicMeta, partMeta) (C, error)) ([]C, error) {
	t, ok := b.metadata().topic(systemTenantID, topic)
	if !ok {
		return nil, errNoTopic
	}
	var out []C
	for _, pm := range t.partitions {
		if pm.leader != b.cfg.ID {
			continue
		}
		c, err := at(ctx, t, pm)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// currentHosted returns the coordinators in m (guarded by b.mu) whose
// leadership this broker still holds, and drops the others.
func currentHosted[C hosted](b *Broker, m map[partKey]C) []C {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]C, 0, len(m))
	for k, c := range m {
		if !c.Current() {
			delete(m, k)
			continue
		}
		out = append(out, c)
	}
	return out
}
