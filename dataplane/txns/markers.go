package txns

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/tenants/system"
)

// Transaction markers: a coordinator's markerWriter writes each marker at
// the leader of its partition (a data partition, or the offsets partition
// of a group), this broker's own replicas directly and the others' through
// Peers.WriteMarkers (their WriteMarkers), retrying across leader changes.

const (
	// markerWriteTimeout bounds one WriteMarkers call (one attempt of the
	// runtime's effect): an end whose markers are not all written by then
	// stays Prepare* and the runtime retries it.
	markerWriteTimeout = 30 * time.Second
	// markerAppendTimeout bounds one marker's acks=all append.
	markerAppendTimeout = 10 * time.Second
)

// MaxMarkersPerRequest bounds the markers of one WriteMarkers call between
// brokers (a transaction may hold more partitions than one request takes).
const MaxMarkersPerRequest = 1000

// errNoOffsetsTopic: the control plane creates the offsets topic once
// enough brokers are live (a group's marker has no partition before).
var errNoOffsetsTopic = derr.New(derr.CoordinatorNotAvailable, "consumer groups are not available yet: the internal offsets topic does not exist (the control plane creates it once --offsets-topic-replication-factor brokers are live)")

// markerWriter is one coordinator's txn.MarkerWriter.
type markerWriter struct {
	s *Service
	// current reports whether the coordinator still leads its partition
	// at its epoch: a deposed coordinator stops writing (the new one
	// writes the markers).
	current func() bool
}

// WriteMarkers writes every marker, grouped by the leader of its partition
// in this broker's view, retrying those not written (no leader yet, the
// leader moved, the ISR too small, ...) with a backoff until all are,
// the coordinator is deposed, or ctx (at most markerWriteTimeout) ends.
// Markers of a deleted topic are dropped: it has no partition to end.
func (w *markerWriter) WriteMarkers(ctx context.Context, markers []txn.Marker) error {
	ctx, cancel := context.WithTimeout(ctx, markerWriteTimeout)
	defer cancel()
	pending := markers
	backoff := 20 * time.Millisecond
	for {
		if w.current != nil && !w.current() {
			return fmt.Errorf("%d of %d markers not written: this broker no longer coordinates the transaction", len(pending), len(markers))
		}
		byLeader := map[int32][]txn.Marker{}
		var failed []txn.Marker
		var errs []error
		for _, m := range pending {
			leader, drop, err := w.s.markerLeader(m)
			switch {
			case drop:
			case err != nil:
				failed = append(failed, m)
				errs = append(errs, err)
			default:
				byLeader[leader] = append(byLeader[leader], m)
			}
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for leader, ms := range byLeader {
			wg.Go(func() {
				f, err := w.s.writeMarkersAt(ctx, leader, ms)
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, f...)
				if err != nil {
					errs = append(errs, fmt.Errorf("broker %d: %w", leader, err))
				}
			})
		}
		wg.Wait()
		if len(failed) == 0 {
			return nil
		}
		pending = failed
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d markers not written: %w (%w)", len(pending), len(markers), errors.Join(errs...), ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// markerLeader is the broker leading the partition m goes to in this
// broker's view; drop: the partition is gone (its topic was deleted).
func (s *Service) markerLeader(m txn.Marker) (leader int32, drop bool, err error) {
	meta := s.deps.View()
	var pm cluster.Partition
	if m.Group != "" {
		t, ok := meta.Topic(system.TenantID, system.OffsetsTopic)
		if !ok || len(t.Partitions) == 0 {
			return 0, false, errNoOffsetsTopic
		}
		pm = t.Partitions[coordinator.PartitionOf(m.Tenant, m.Group, len(t.Partitions))]
	} else {
		t, ok := meta.ByID[m.Partition.TopicID]
		if !ok || t.TenantID != m.Tenant {
			if !meta.Loaded {
				return 0, false, errors.New("no assignments from the control plane yet")
			}
			return 0, true, nil
		}
		if int(m.Partition.Partition) >= len(t.Partitions) {
			return 0, false, cluster.PartitionNotFound(t, m.Partition.Partition)
		}
		pm = t.Partitions[m.Partition.Partition]
	}
	if pm.Leader < 0 {
		return 0, false, meta.NotLeader(s.cfg.BrokerID, pm)
	}
	return pm.Leader, false, nil
}

// writeMarkersAt writes markers at one leader (this broker, or another
// through Peers.WriteMarkers) and returns those not written.
func (s *Service) writeMarkersAt(ctx context.Context, leader int32, markers []txn.Marker) ([]txn.Marker, error) {
	if leader == s.cfg.BrokerID {
		errs := s.WriteMarkers(ctx, markers)
		var failed []txn.Marker
		for i, err := range errs {
			if err != nil {
				failed = append(failed, markers[i])
			}
		}
		return failed, errors.Join(errs...)
	}
	var failed []txn.Marker
	var errs []error
	for chunk := range slices.Chunk(markers, MaxMarkersPerRequest) {
		f, err := s.sendMarkers(ctx, leader, chunk)
		failed = append(failed, f...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return failed, errors.Join(errs...)
}

// sendMarkers writes markers at another broker and returns those not
// written.
func (s *Service) sendMarkers(ctx context.Context, leader int32, markers []txn.Marker) ([]txn.Marker, error) {
	results, err := s.deps.Peers.WriteMarkers(ctx, leader, markers)
	if err != nil {
		return markers, err
	}
	if len(results) != len(markers) {
		return markers, fmt.Errorf("WriteTxnMarkers answered %d results for %d markers", len(results), len(markers))
	}
	var failed []txn.Marker
	var errs []error
	for i, err := range results {
		if err != nil {
			failed = append(failed, markers[i])
			errs = append(errs, err)
		}
	}
	return failed, errors.Join(errs...)
}

// WriteMarkers writes markers a transaction coordinator asks this broker
// to, each at this broker's replica of its partition (or its group's
// coordinator), in parallel, and returns each one's error (nil: written):
// NotLeader where this broker does not lead the partition.
func (s *Service) WriteMarkers(ctx context.Context, markers []txn.Marker) []error {
	errs := make([]error, len(markers))
	var wg sync.WaitGroup
	for i, m := range markers {
		wg.Go(func() { errs[i] = s.writeMarker(ctx, m) })
	}
	wg.Wait()
	return errs
}

// writeMarker writes one marker to a partition this broker leads: a data
// partition's replica (partition.WriteMarker), or the group coordinator of
// the group's offsets partition (Deps.GroupMarker).
func (s *Service) writeMarker(ctx context.Context, m txn.Marker) error {
	if m.Group != "" {
		return s.deps.GroupMarker(ctx, m)
	}
	meta := s.deps.View()
	t, ok := meta.ByID[m.Partition.TopicID]
	if !ok || t.TenantID != m.Tenant {
		return derr.New(derr.UnknownTopicOrPartition, "topic %s not found", m.Partition.TopicID)
	}
	if m.Partition.Partition < 0 || int(m.Partition.Partition) >= len(t.Partitions) {
		return cluster.PartitionNotFound(t, m.Partition.Partition)
	}
	pm := t.Partitions[m.Partition.Partition]
	p := s.deps.Replica(t.ID, pm.Partition)
	if pm.Leader != s.cfg.BrokerID || p == nil {
		return meta.NotLeader(s.cfg.BrokerID, pm)
	}
	_, err := p.WriteMarker(ctx, partition.Marker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, CoordinatorEpoch: m.CoordinatorEpoch, Commit: m.Commit}, markerAppendTimeout)
	return err
}
