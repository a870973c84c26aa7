package sqlstore

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Lane is a write's place in the queue of a single-writer database
// (Config.SingleWriter): urgent writes go before every normal write
// waiting, each lane in arrival order.
type Lane int

const (
	// LaneNormal is every write but the urgent ones.
	LaneNormal Lane = iota
	// LaneUrgent is for the writes whose delay costs availability: a
	// broker's heartbeat (its lease lapses, its partitions move) and the
	// controller's lease.
	LaneUrgent
	numLanes
)

// writeGate lets the callers of a one-connection write pool ask for the
// connection one at a time, urgent ones first, each lane in arrival order.
// database/sql hands a freed connection to a random waiter: with a dozen
// writers waiting, a heartbeat could wait for all of them, and under load
// (sluice dev beside a busy test suite, 2 cores) brokers lost their leases
// behind metadata writes. Through the gate at most one caller waits in the
// pool at a time; the others wait here, in order.
//
// A caller holds the gate from entering until the pool gave it the
// connection (its statement ran, or its transaction began), not for the
// transaction: the next caller then waits in the pool for that connection,
// alone.
type writeGate struct {
	mu      sync.Mutex
	busy    bool
	waiting [numLanes][]chan struct{}
	stats   [numLanes]LaneStats
}

// LaneStats are the counts of one lane of a single-writer database's
// queue.
type LaneStats struct {
	// Writes is how many writes entered the queue; Waited their total
	// time in it (until the pool was theirs to ask).
	Writes int64
	Waited time.Duration
	// Waiting is how many wait now.
	Waiting int
}

// enter waits until the caller may ask the pool for the connection, or
// ctx ends. A caller that entered calls leave.
func (g *writeGate) enter(ctx context.Context, lane Lane) error {
	start := time.Now()
	g.mu.Lock()
	g.stats[lane].Writes++
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiting[lane] = append(g.waiting[lane], ch)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.stats[lane].Waited += time.Since(start)
		g.mu.Unlock()
	}()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		if i := slices.Index(g.waiting[lane], ch); i >= 0 {
			g.waiting[lane] = slices.Delete(g.waiting[lane], i, i+1)
			g.mu.Unlock()
			return ctx.Err()
		}
		g.mu.Unlock()
		// Handed the gate as ctx ended: pass it on.
		g.leave()
		return ctx.Err()
	}
}

// leave hands the gate to the first caller waiting in the most urgent
// lane, or opens it.
func (g *writeGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for lane := numLanes - 1; lane >= 0; lane-- {
		if q := g.waiting[lane]; len(q) > 0 {
			g.waiting[lane] = q[1:]
			close(q[0]) // still busy: it is the next caller's
			return
		}
	}
	g.busy = false
}

func (g *writeGate) snapshot() [numLanes]LaneStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.stats
	for lane := range out {
		out[lane].Waiting = len(g.waiting[lane])
	}
	return out
}
