package runtime

import (
	"context"
	"sync"
)

// Hostable is what a Runtime keeps: a *Hosted of any shard type.
type Hostable interface {
	Epoch() int32
	Partition() Partition
	Current() bool
	Load(ctx context.Context) error
	Run(ctx context.Context)
	Close()
}

// PartitionKey names an internal-topic partition a Runtime hosts a shard
// on.
type PartitionKey struct {
	Topic     string
	Partition int32
}

// Runtime keeps a broker's hosted shards, one per internal-topic partition
// it leads, whatever their kind: the one hosting loop of every
// coordinator. Every method may be called concurrently.
type Runtime struct {
	ctx    context.Context // the hosted shards' Run, until Close
	cancel context.CancelFunc

	mu     sync.Mutex
	shards map[PartitionKey]Hostable
	wg     sync.WaitGroup
}

// NewRuntime returns an empty runtime; its shards run (timers, effect
// retries) until Close.
func NewRuntime() *Runtime {
	ctx, cancel := context.WithCancel(context.Background())
	return &Runtime{ctx: ctx, cancel: cancel, shards: map[PartitionKey]Hostable{}}
}

// Host returns the loaded shard of partition k: the one kept for leader
// epoch epoch on partition p, else a new one from mk, which replaces (and
// closes) the one kept. It answers Load's error while the new one cannot
// load (p not ready).
func Host[H Hostable](ctx context.Context, rt *Runtime, k PartitionKey, epoch int32, p Partition, mk func() H) (H, error) {
	var none H
	rt.mu.Lock()
	cur, ok := rt.shards[k]
	h, same := cur.(H)
	var old Hostable
	if !ok || !same || cur.Epoch() != epoch || cur.Partition() != p {
		old = cur
		h = mk()
		rt.shards[k] = h
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			h.Run(rt.ctx)
		}()
	}
	rt.mu.Unlock()
	if old != nil {
		go old.Close()
	}
	if err := h.Load(ctx); err != nil {
		return none, err
	}
	return h, nil
}

// Current returns the shards kept whose leadership the broker still holds,
// and drops (closes) the others.
func (rt *Runtime) Current() []Hostable {
	rt.mu.Lock()
	var out, gone []Hostable
	for k, h := range rt.shards {
		if !h.Current() {
			delete(rt.shards, k)
			gone = append(gone, h)
			continue
		}
		out = append(out, h)
	}
	rt.mu.Unlock()
	for _, h := range gone {
		go h.Close()
	}
	return out
}

// Shards returns the shards kept (current or not yet dropped).
func (rt *Runtime) Shards() []Hostable {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]Hostable, 0, len(rt.shards))
	for _, h := range rt.shards {
		out = append(out, h)
	}
	return out
}

// Close closes every shard and waits for their Run to end.
func (rt *Runtime) Close() {
	rt.cancel()
	rt.mu.Lock()
	all := rt.shards
	rt.shards = map[PartitionKey]Hostable{}
	rt.mu.Unlock()
	for _, h := range all {
		h.Close()
	}
	rt.wg.Wait()
}
