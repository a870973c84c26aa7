package log

import (
	"sync"
	"time"
)

// flushWorkers is the most fsyncs an interval flush runs at once.
const flushWorkers = 16

// flushGroup is the interval flush of the FlushInterval logs that share a
// FileCache and a Config.FlushInterval: one goroutine whose ticker fsyncs,
// every interval, the logs that appended since their last flush.
type flushGroup struct {
	interval time.Duration
	stop     chan struct{}

	mu      sync.Mutex
	members int
	pending []*Log // appended since queued; each log at most once (Log.flushQueued)
}

// addFlusher makes the cache's flush group for l's interval flush l, and
// starts the group's goroutine with its first member.
func (c *FileCache) addFlusher(l *Log) *flushGroup {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	if c.flushGroups == nil {
		c.flushGroups = map[time.Duration]*flushGroup{}
	}
	g := c.flushGroups[l.cfg.FlushInterval]
	if g == nil {
		g = &flushGroup{interval: l.cfg.FlushInterval, stop: make(chan struct{})}
		c.flushGroups[g.interval] = g
		go g.run()
	}
	g.mu.Lock()
	g.members++
	g.mu.Unlock()
	return g
}

// removeFlusher drops l (closed) from its flush group, and stops the
// group's goroutine with its last member. A flush of l may still run; it
// finds l closed.
func (c *FileCache) removeFlusher(g *flushGroup) {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	g.mu.Lock()
	g.members--
	last := g.members == 0
	g.mu.Unlock()
	if last {
		close(g.stop)
		delete(c.flushGroups, g.interval)
	}
}

// queue asks for a flush of l at the next tick. Called by l's writer after
// it published an append, when l was not queued already.
func (g *flushGroup) queue(l *Log) {
	g.mu.Lock()
	g.pending = append(g.pending, l)
	g.mu.Unlock()
}

func (g *flushGroup) run() {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	sem := make(chan struct{}, flushWorkers)
	var wg sync.WaitGroup
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		g.mu.Lock()
		due := g.pending
		g.pending = nil
		g.mu.Unlock()
		for _, l := range due {
			// Cleared before the fsync: an append from now on queues l
			// again, and this fsync covers every append before.
			l.flushQueued.Store(false)
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = l.Sync() // a failure is recorded by fail and returned to writers
				<-sem
			}()
		}
		wg.Wait()
	}
}
