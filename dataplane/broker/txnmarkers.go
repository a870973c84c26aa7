package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Transaction markers: a coordinator's markerWriter writes each marker at
// the leader of its partition (a data partition, or the offsets partition
// of a group), this broker's own replicas directly and the others'
// through ReplicaService.WriteTxnMarkers, retrying across leader changes.

const (
	// markerWriteTimeout bounds one WriteMarkers call (one attempt of the
	// runtime's effect): an end whose markers are not all written by then
	// stays Prepare* and the runtime retries it.
	markerWriteTimeout = 30 * time.Second
	// markerAppendTimeout bounds one marker's acks=all append.
	markerAppendTimeout = 10 * time.Second
)

// markerWriter is one coordinator's txn.MarkerWriter.
type markerWriter struct {
	b *Broker
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
			leader, drop, err := w.b.markerLeader(m)
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
				f, err := w.b.writeMarkersAt(ctx, leader, ms)
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
func (b *Broker) markerLeader(m txn.Marker) (leader int32, drop bool, err error) {
	meta := b.metadata()
	var pm cluster.Partition
	if m.Group != "" {
		t, ok := meta.Topic(systemTenantID, offsetsTopic)
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
			return 0, false, unknownPartition(t, m.Partition.Partition)
		}
		pm = t.Partitions[m.Partition.Partition]
	}
	if pm.Leader < 0 {
		return 0, false, b.notLeader(pm)
	}
	return pm.Leader, false, nil
}

// writeMarkersAt writes markers at one leader (this broker, or another
// through WriteTxnMarkers) and returns those not written.
func (b *Broker) writeMarkersAt(ctx context.Context, leader int32, markers []txn.Marker) ([]txn.Marker, error) {
	if leader == b.cfg.ID {
		errs := make([]error, len(markers))
		var wg sync.WaitGroup
		for i, m := range markers {
			wg.Go(func() { errs[i] = b.writeMarker(ctx, m) })
		}
		wg.Wait()
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
	for chunk := range slices.Chunk(markers, maxMarkersPerRequest) {
		f, err := b.sendMarkers(ctx, leader, chunk)
		failed = append(failed, f...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return failed, errors.Join(errs...)
}

// maxMarkersPerRequest bounds the markers of one WriteTxnMarkers request
// (a transaction may hold more partitions than one request takes).
const maxMarkersPerRequest = 1000

// sendMarkers writes markers at another broker (WriteTxnMarkers) and
// returns those not written.
func (b *Broker) sendMarkers(ctx context.Context, leader int32, markers []txn.Marker) ([]txn.Marker, error) {
	req := &sluicev1.WriteTxnMarkersRequest{}
	for _, m := range markers {
		req.Markers = append(req.Markers, &sluicev1.TxnMarker{
			TenantId: m.Tenant, TopicId: m.Partition.TopicID, Partition: m.Partition.Partition, Group: m.Group,
			Commit: m.Commit, ProducerId: m.ProducerID, ProducerEpoch: int32(m.ProducerEpoch), CoordinatorEpoch: m.CoordinatorEpoch,
		})
	}
	res, err := b.peer(leader).replica.WriteTxnMarkers(ctx, connect.NewRequest(req))
	if err != nil {
		return markers, err
	}
	results := res.Msg.GetResults()
	if len(results) != len(markers) {
		return markers, fmt.Errorf("WriteTxnMarkers answered %d results for %d markers", len(results), len(markers))
	}
	var failed []txn.Marker
	var errs []error
	for i, r := range results {
		if pe := r.GetError(); pe != nil {
			failed = append(failed, markers[i])
			errs = append(errs, fmt.Errorf("%s: %s", connect.Code(pe.GetCode()), pe.GetMessage()))
		}
	}
	return failed, errors.Join(errs...)
}

// writeMarker writes one marker to a partition this broker leads: a data
// partition's replica (partition.WriteMarker), or the group coordinator of
// the group's offsets partition (WriteTxnMarker).
func (b *Broker) writeMarker(ctx context.Context, m txn.Marker) error {
	if m.Group != "" {
		c, _, err := b.coordinatorFor(ctx, m.Tenant, m.Group)
		if err != nil {
			return err
		}
		return c.WriteTxnMarker(ctx, m.Tenant, m.Group, m.ProducerID, m.ProducerEpoch, m.CoordinatorEpoch, m.Commit)
	}
	t, ok := b.metadata().ByID[m.Partition.TopicID]
	if !ok || t.TenantID != m.Tenant {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("topic %s not found", m.Partition.TopicID))
	}
	if m.Partition.Partition < 0 || int(m.Partition.Partition) >= len(t.Partitions) {
		return unknownPartition(t, m.Partition.Partition)
	}
	pm := t.Partitions[m.Partition.Partition]
	p := b.partition(t.ID, pm.Partition)
	if pm.Leader != b.cfg.ID || p == nil {
		return b.notLeader(pm)
	}
	_, err := p.WriteMarker(ctx, partition.Marker{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch, CoordinatorEpoch: m.CoordinatorEpoch, Commit: m.Commit}, markerAppendTimeout)
	return err
}

// WriteTxnMarkers appends transaction markers as a coordinator asks: each
// at this broker's replica of its partition (or its group's offsets
// partition's coordinator), in parallel, each answered with its own result
// (mapped as a ProduceMany entry's error is).
func (s *replicaService) WriteTxnMarkers(ctx context.Context, req *connect.Request[sluicev1.WriteTxnMarkersRequest]) (*connect.Response[sluicev1.WriteTxnMarkersResponse], error) {
	ms := req.Msg.GetMarkers()
	if len(ms) > maxMarkersPerRequest {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("markers: at most %d per request; got %d", maxMarkersPerRequest, len(ms)))
	}
	rs := &recordService{s.b}
	results := make([]*sluicev1.TxnMarkerResult, len(ms))
	var wg sync.WaitGroup
	for i, pm := range ms {
		wg.Go(func() {
			err := validMarker(pm)
			if err == nil {
				err = s.b.writeMarker(ctx, txn.Marker{
					Tenant: pm.GetTenantId(), Partition: txn.TopicPartition{TopicID: pm.GetTopicId(), Partition: pm.GetPartition()}, Group: pm.GetGroup(),
					Commit: pm.GetCommit(), ProducerID: pm.GetProducerId(), ProducerEpoch: int16(pm.GetProducerEpoch()), CoordinatorEpoch: pm.GetCoordinatorEpoch(),
				})
			}
			results[i] = &sluicev1.TxnMarkerResult{}
			if err != nil {
				results[i].Error = rs.produceError(ctx, err)
			}
		})
	}
	wg.Wait()
	return connect.NewResponse(&sluicev1.WriteTxnMarkersResponse{Results: results}), nil
}

func validMarker(m *sluicev1.TxnMarker) error {
	switch {
	case m.GetTenantId() == "":
		return connect.NewError(connect.CodeInvalidArgument, errors.New("tenant_id: must not be empty"))
	case (m.GetTopicId() == "") == (m.GetGroup() == ""):
		return connect.NewError(connect.CodeInvalidArgument, errors.New("topic_id or group: exactly one must be set"))
	case m.GetPartition() < 0:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("partition: must not be negative; got %d", m.GetPartition()))
	case m.GetProducerId() < 0:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("producer_id: must not be negative; got %d", m.GetProducerId()))
	case m.GetProducerEpoch() < 0 || m.GetProducerEpoch() > math.MaxInt16:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("producer_epoch: must be between 0 and %d; got %d", math.MaxInt16, m.GetProducerEpoch()))
	case m.GetCoordinatorEpoch() < 0:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("coordinator_epoch: must not be negative; got %d", m.GetCoordinatorEpoch()))
	}
	return nil
}
