package client

import "fmt"

// Debug describes the member's state for test failure output.
func (g *GroupConsumer) Debug() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("member=%s epoch=%d owned=%v assigned=%v starting=%v assign=%v revoke=%v hbErr=%v",
		g.memberID, g.epoch, keys(g.owned), keys(g.assigned), keys(g.starting), g.assign, g.revoke, g.hbErr)
}

func keys(m map[TopicPartition]bool) []int32 {
	var out []int32
	for tp := range m {
		out = append(out, tp.Partition)
	}
	return out
}

// QueuedProduces is how many requests the producer's sinks handed to their
// leader brokers' connections that wait for a ProduceMany slot.
func QueuedProduces(p *Producer) int {
	p.mu.Lock()
	lcs := make([]*leaderConn, 0, len(p.leaders))
	for _, lc := range p.leaders {
		lcs = append(lcs, lc)
	}
	p.mu.Unlock()
	n := 0
	for _, lc := range lcs {
		lc.mu.Lock()
		n += len(lc.queue)
		lc.mu.Unlock()
	}
	return n
}
