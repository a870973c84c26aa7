// Package replicas is the set of partition replicas a broker hosts, the
// equivalent of Kafka's ReplicaManager: applied from each cluster view
// the control plane streams to the broker (Apply for a snapshot,
// ApplyDelta for a delta), it opens the replicas
// (dataplane/partition) of the partitions placed on the broker, brings
// each to the role the view gives it, closes those that moved away, and
// deletes the data of deleted topics, also of those deleted while the
// broker was down (strays.go). It keeps the broker's HW checkpoint (one
// file in the data dir for every replica, hwcheckpoint.go) and runs the
// loops over every replica: the checkpoint and producer-state snapshots,
// and retention.
//
// A replica reaches the broker through its partition.Host (the broker's
// id, its metrics, the leaders' and the controller's clients, the tiered
// storage, FailStop), which the broker builds and wires; this package
// knows no service, no protocol and no broker. Lock order: the Manager's
// lock before a replica's lock; no lock is held across disk I/O of a
// replica's open or across network calls.
package replicas

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/tenants/system"
)

// Config is what a Manager needs.
type Config struct {
	// DataDir holds a directory per replica (Dir) and the HW checkpoint.
	DataDir string
	// Host is what the replicas reach the broker through; its ID is the
	// broker's, its Logger logs the Manager's work too, its Tier (nil:
	// off) holds the tenants' cold data, and its FailStop stops the
	// broker when a replica's log fails.
	Host *partition.Host
	// HWs are the high watermarks the broker's checkpoint held at start
	// (ReadHWCheckpoint).
	HWs map[cluster.PartKey]int64
}

// Manager is the set of replicas a broker hosts. It is safe for
// concurrent use; Apply and ApplyDelta are called by one goroutine (the
// assignment stream's), so no two calls open the same replica at once.
type Manager struct {
	cfg    Config
	logger *slog.Logger

	mu    sync.Mutex
	parts map[cluster.PartKey]*partition.Replica
	// swept: the data dir was checked, against the first view applied,
	// for partitions of topics deleted while the broker was down.
	swept bool
	// hwKept are the checkpointed HWs of the partitions whose data is in
	// the data dir but that are not open: read from the HW checkpoint at
	// start (an entry goes when its partition opens), and those of
	// replicas closed because they moved to other brokers. The partitions
	// of deleted topics leave it.
	hwKept map[cluster.PartKey]int64

	// hwMu serialises the HW checkpoint's writes; hwWritten is what the
	// file holds.
	hwMu      sync.Mutex
	hwWritten map[cluster.PartKey]int64
}

// New returns the Manager of the replicas in cfg.DataDir, none open yet.
func New(cfg Config) *Manager {
	hwKept := maps.Clone(cfg.HWs)
	if hwKept == nil {
		hwKept = map[cluster.PartKey]int64{}
	}
	return &Manager{
		cfg:    cfg,
		logger: cfg.Host.Logger,
		parts:  map[cluster.PartKey]*partition.Replica{},
		hwKept: hwKept,
		// The file holds what was read: nothing to write until something
		// changes.
		hwWritten: maps.Clone(hwKept),
	}
}

// All returns the open replicas at this moment, for loops that must not
// hold the Manager's lock while they work on each.
func (m *Manager) All() []*partition.Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.parts))
}

// Get returns the open replica of partition id of topicID, nil if none.
func (m *Manager) Get(topicID string, id int32) *partition.Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[cluster.PartKey{TopicID: topicID, Partition: id}]
}

// Apply brings every replica to the role it has in v, a view from a
// snapshot: leader, follower, or none (closed; its data deleted when v
// no longer has its topic). The first view applied also decides which
// partition directories belong to topics deleted while the broker was
// down (deleteStrays). ctx is the broker's run: the replicas' work and
// the deletions in the background end with it.
func (m *Manager) Apply(ctx context.Context, v *cluster.View) {
	self := m.cfg.Host.ID
	want := map[cluster.PartKey]bool{}
	var us []update
	for _, t := range v.ByID {
		for _, pm := range t.Partitions {
			if !pm.HasReplica(self) {
				continue
			}
			want[cluster.PartKey{TopicID: t.ID, Partition: pm.Partition}] = true
			us = append(us, update{t, pm})
		}
	}
	m.update(ctx, us)
	m.mu.Lock()
	var drop []*partition.Replica
	for k, p := range m.parts {
		if !want[k] {
			drop = append(drop, p)
			m.closeLocked(v, k, p)
		}
	}
	for k := range m.hwKept {
		if _, exists := v.ByID[k.TopicID]; !exists {
			delete(m.hwKept, k) // a deleted topic's: its data goes
		}
	}
	sweep := !m.swept
	m.swept = true
	m.mu.Unlock()
	if sweep {
		m.deleteStrays(ctx, v)
	}
	m.drop(ctx, v, drop)
}

// ApplyDelta brings the replicas of the partitions a delta changed — and
// only those — to their role in v, the view the delta made of the one
// before: the cost follows the delta, not the partitions hosted. A delta
// comes after a snapshot of the same stream (Apply), so the first view
// and its sweep of strays are done.
func (m *Manager) ApplyDelta(ctx context.Context, v *cluster.View, changed []cluster.PartKey) {
	self := m.cfg.Host.ID
	var drop []*partition.Replica
	var us []update
	for _, k := range changed {
		if t, ok := v.ByID[k.TopicID]; ok && int(k.Partition) < len(t.Partitions) && t.Partitions[k.Partition].HasReplica(self) {
			us = append(us, update{t, t.Partitions[k.Partition]})
			continue
		}
		m.mu.Lock()
		if p, ok := m.parts[k]; ok {
			drop = append(drop, p)
			m.closeLocked(v, k, p)
		} else if _, exists := v.ByID[k.TopicID]; !exists {
			delete(m.hwKept, k)
		}
		m.mu.Unlock()
	}
	m.update(ctx, us)
	m.drop(ctx, v, drop)
}

// update is a partition of which a new view gives this broker a replica.
type update struct {
	t  *cluster.Topic
	pm cluster.Partition
}

// openParallel is how many replicas update opens at once. Opening
// creates or recovers a replica's files and fsyncs them; one at a time,
// 3,000 new partitions took a broker about 9 s to open (issue 15), and
// concurrent fsyncs of different files share the file system's commits.
const openParallel = 8

// update opens the replicas of us that are not open yet, openParallel at
// a time, then applies each one's assignment and its topic's config, in
// the order of us.
func (m *Manager) update(ctx context.Context, us []update) {
	// One open per partition, even if us lists one twice.
	first := make(map[cluster.PartKey]int, len(us))
	for i, u := range us {
		if _, ok := first[cluster.PartKey{TopicID: u.t.ID, Partition: u.pm.Partition}]; !ok {
			first[cluster.PartKey{TopicID: u.t.ID, Partition: u.pm.Partition}] = i
		}
	}
	ps := make([]*partition.Replica, len(us))
	errs := make([]error, len(us))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(openParallel, len(first)) {
		wg.Go(func() {
			for i := range next {
				ps[i], errs[i] = m.Open(us[i].t, us[i].pm)
			}
		})
	}
	for _, i := range first {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, u := range us {
		i := first[cluster.PartKey{TopicID: u.t.ID, Partition: u.pm.Partition}]
		if errs[i] != nil {
			m.logger.Error("open partition", "topic", u.t.ID, "partition", u.pm.Partition, "err", errs[i])
			continue
		}
		ps[i].Update(ctx, u.pm.Assignment(), u.t.Config.Replica())
	}
}

// closeLocked takes replica p of partition k out of the open ones, to be
// dropped (drop). When view v still has its topic, its data stays, so its
// HW stays in the checkpoint (hwKept).
func (m *Manager) closeLocked(v *cluster.View, k cluster.PartKey, p *partition.Replica) {
	delete(m.parts, k)
	if _, exists := v.ByID[k.TopicID]; exists {
		m.hwKept[k] = p.HighWatermark()
	}
}

// drop stops and closes replicas the broker no longer hosts in v
// (already taken out of m.parts), deleting the data of those whose topic
// v no longer has.
func (m *Manager) drop(ctx context.Context, v *cluster.View, drop []*partition.Replica) {
	for _, p := range drop {
		p.Stop()
		if err := p.Log().Close(); err != nil {
			m.logger.Warn("close partition log", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
		}
		if _, exists := v.ByID[p.TopicID()]; exists {
			// The replica moved to other brokers: keep the data until
			// reassignment (later work) says it may go.
			continue
		}
		// The topic was deleted (topic ids are never reused): its data goes.
		if err := os.RemoveAll(p.Dir()); err != nil {
			m.logger.Warn("delete partition data", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
			continue
		}
		m.logger.Info("deleted partition data of a deleted topic", "topic", p.TopicID(), "partition", p.Partition())
		if p.Tiered() {
			go m.deleteRemotePartition(ctx, p.TenantID(), p.TopicID(), p.Partition())
		}
	}
}

// Open returns the replica of partition pm of topic t, opening it on
// first use.
func (m *Manager) Open(t *cluster.Topic, pm cluster.Partition) (*partition.Replica, error) {
	k := cluster.PartKey{TopicID: t.ID, Partition: pm.Partition}
	m.mu.Lock()
	p, ok := m.parts[k]
	hw, hwKnown := m.hwKept[k]
	m.mu.Unlock()
	if ok {
		return p, nil
	}
	// Outside m.mu: opening does disk I/O, and the lock serves every
	// request's partition lookup.
	p, err := partition.Open(m.cfg.Host, partition.Spec{
		TenantID: t.TenantID, TopicID: t.ID, Partition: pm.Partition,
		Dir: m.dir(t.TenantID, t.ID, pm.Partition),
		HW:  hw, HWKnown: hwKnown,
		Config: t.Config.Replica(),
		Tiered: m.cfg.Host.Tier != nil && t.TenantID != system.TenantID,
	})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.parts[k] = p
	delete(m.hwKept, k) // the replica has it now
	return p, nil
}

// dir is where a replica's log lives: tenant id, then topic id (never
// reused) and partition, so nothing of two tenants shares a folder.
func (m *Manager) dir(tenantID, topicID string, id int32) string {
	return filepath.Join(m.cfg.DataDir, tenantID, fmt.Sprintf("%s-%d", topicID, id))
}

// Close stops every replica, writes the last HW checkpoint (keeping their
// HWs for the next start), snapshots their producer state and closes
// their logs. The broker calls it once its client port has drained.
func (m *Manager) Close() {
	m.mu.Lock()
	parts := m.parts
	m.parts = map[cluster.PartKey]*partition.Replica{}
	m.mu.Unlock()
	for _, p := range parts {
		p.Stop()
	}
	// Their last HWs, kept for the next start.
	m.mu.Lock()
	for k, p := range parts {
		m.hwKept[k] = p.HighWatermark()
	}
	m.mu.Unlock()
	if err := m.CheckpointHWs(); err != nil {
		m.logger.Warn("checkpoint high watermarks", "err", err)
	}
	for _, p := range parts {
		if err := p.SnapshotProducers(time.Now(), true); err != nil {
			m.logger.Warn("snapshot producer state", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
		}
		if err := p.Log().Close(); err != nil {
			m.logger.Warn("close partition log", "topic", p.TopicID(), "partition", p.Partition(), "err", err)
		}
	}
}
