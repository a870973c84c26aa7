package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const remoteSegmentColumns = `segment_id, tenant_id, topic_id, partition, base_offset, end_offset, leader_epoch,
	size_bytes, max_timestamp_ms, object_key, state, broker_id, epochs, created_at, updated_at`

// remoteSegmentSelect is what scanRemoteSegment reads.
const remoteSegmentSelect = remoteSegmentColumns + `, copy_finished`

func scanRemoteSegment(r Scanner) (store.RemoteSegment, error) {
	var (
		seg    store.RemoteSegment
		state  string
		epochs []byte
	)
	if err := r.Scan(&seg.ID, &seg.TenantID, &seg.TopicID, &seg.Partition, &seg.BaseOffset, &seg.EndOffset, &seg.LeaderEpoch,
		&seg.SizeBytes, &seg.MaxTimestampMs, &seg.ObjectKey, &state, &seg.BrokerID, &epochs,
		ScanTime(&seg.CreatedAt), ScanTime(&seg.UpdatedAt), &seg.CopyFinished); err != nil {
		return store.RemoteSegment{}, err
	}
	var err error
	if seg.Epochs, err = store.ParseEpochsJSON(epochs); err != nil {
		return store.RemoteSegment{}, err
	}
	seg.State = store.RemoteSegmentState(state)
	return seg, nil
}

// remoteFence reads, in tx, what a remote-segment write of (topicID,
// partition) by broker f.BrokerID is decided on, and the topic's tenant.
//
// Locks (Postgres): the broker row FOR SHARE (a re-registration, which
// bumps the epoch, waits for the write to commit), then the partition row
// FOR NO KEY UPDATE, which conflicts with every UPDATE of the partition
// (leader changes by the controller, ISR changes) and with itself: the
// partition's remote-segment writes run one at a time, each seeing the
// leader and the finished segments as committed before it. Every
// remote-segment transaction takes the locks in this order. On SQLite the
// write transaction holds the database's write lock from these reads to the
// commit: no leader change, re-registration or other remote-segment write
// comes in between.
func (s *Store) remoteFence(ctx context.Context, tx *sql.Tx, f store.LeaderFence, topicID string, partition int32) (store.RemoteFenceState, string, error) {
	var st store.RemoteFenceState
	if err := tx.QueryRowContext(ctx, `SELECT epoch FROM brokers WHERE id = $1`+s.db.Lock(LockShare), f.BrokerID).Scan(&st.BrokerEpoch); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return st, "", fmt.Errorf("broker %d is not registered: %w", f.BrokerID, store.ErrNotFound)
		}
		return st, "", err
	}
	var tenantID string
	if err := tx.QueryRowContext(ctx,
		`SELECT p.leader, p.leader_epoch, t.tenant_id FROM partitions p JOIN topics t ON t.id = p.topic_id
		 WHERE p.topic_id = $1 AND p.partition = $2`+s.db.Lock(LockNoKeyUpdate, "p"),
		topicID, partition).Scan(&st.Leader, &st.LeaderEpoch, &tenantID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return st, "", fmt.Errorf("partition %d of topic %s: %w", partition, topicID, store.ErrNotFound)
		}
		return st, "", err
	}
	// Finished segments are consecutive, so the highest base offset among
	// them has the highest end offset (read backwards along the index).
	err := tx.QueryRowContext(ctx,
		`SELECT end_offset + 1 FROM remote_segments WHERE topic_id = $1 AND partition = $2 AND copy_finished
		 ORDER BY base_offset DESC LIMIT 1`, topicID, partition).Scan(&st.NextBaseOffset)
	if errors.Is(err, sql.ErrNoRows) {
		st.NextBaseOffset, err = -1, nil
	}
	return st, tenantID, err
}

// AddRemoteSegment implements store.Store.
func (s *Store) AddRemoteSegment(ctx context.Context, f store.LeaderFence, seg store.RemoteSegment) (store.RemoteSegment, error) {
	seg, err := store.CheckRemoteSegment(f, seg)
	if err != nil {
		return store.RemoteSegment{}, err
	}
	created := s.db.Time(orNow(seg.CreatedAt))
	var out store.RemoteSegment
	err = s.db.InTx(ctx, func(tx *sql.Tx) error {
		st, tenantID, err := s.remoteFence(ctx, tx, f, seg.TopicID, seg.Partition)
		if err != nil {
			return err
		}
		if tenantID != seg.TenantID {
			return fmt.Errorf("invalid remote segment %s: tenant %s does not own topic %s", seg.ID, seg.TenantID, seg.TopicID)
		}
		if err := store.CheckRemoteAdd(f, st, seg); err != nil {
			return err
		}
		out, err = scanRemoteSegment(tx.QueryRowContext(ctx,
			`INSERT INTO remote_segments (`+remoteSegmentColumns+`, copy_finished)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14, false)
			 RETURNING `+remoteSegmentSelect,
			seg.ID, seg.TenantID, seg.TopicID, seg.Partition, seg.BaseOffset, seg.EndOffset, seg.LeaderEpoch,
			seg.SizeBytes, seg.MaxTimestampMs, seg.ObjectKey, string(store.RemoteCopyStarted), f.BrokerID,
			store.EpochsJSON(seg.Epochs), created))
		return err
	})
	if err != nil {
		return store.RemoteSegment{}, s.db.Translate("add remote segment", err)
	}
	return out, nil
}

// UpdateRemoteSegmentState implements store.Store.
func (s *Store) UpdateRemoteSegmentState(ctx context.Context, f store.LeaderFence, topicID string, partition int32, segmentID string, to store.RemoteSegmentState, at time.Time) (store.RemoteSegment, error) {
	tid, ok := store.CanonicalID(topicID)
	if !ok {
		return store.RemoteSegment{}, fmt.Errorf("topic %q: %w", topicID, store.ErrNotFound)
	}
	sid, ok := store.CanonicalID(segmentID)
	if !ok {
		return store.RemoteSegment{}, fmt.Errorf("remote segment %q: %w", segmentID, store.ErrNotFound)
	}
	var out store.RemoteSegment
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		st, _, err := s.remoteFence(ctx, tx, f, tid, partition)
		if err != nil {
			return err
		}
		cur, err := scanRemoteSegment(tx.QueryRowContext(ctx,
			`SELECT `+remoteSegmentSelect+` FROM remote_segments WHERE segment_id = $1 AND topic_id = $2 AND partition = $3`,
			sid, tid, partition))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("remote segment %s of partition %d of topic %s: %w", sid, partition, tid, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		done, err := store.CheckRemoteUpdate(f, st, cur, to)
		if err != nil || done {
			out = cur
			return err
		}
		out, err = scanRemoteSegment(tx.QueryRowContext(ctx,
			`UPDATE remote_segments SET state = $1, copy_finished = copy_finished OR $1 = 'copy_finished', updated_at = $2
			 WHERE segment_id = $3 RETURNING `+remoteSegmentSelect,
			string(to), s.db.Time(orNow(at)), sid))
		return err
	})
	if err != nil {
		return store.RemoteSegment{}, s.db.Translate("update remote segment", err)
	}
	return out, nil
}

// ListRemoteSegments implements store.Store.
func (s *Store) ListRemoteSegments(ctx context.Context, topicID string, partition int32, states []store.RemoteSegmentState) ([]store.RemoteSegment, error) {
	tid, ok := store.CanonicalID(topicID)
	if !ok {
		return nil, nil
	}
	q := `SELECT ` + remoteSegmentSelect + ` FROM remote_segments WHERE topic_id = $1 AND partition = $2`
	args := []any{tid, partition}
	if len(states) > 0 {
		filter := make([]string, len(states))
		for i, st := range states {
			filter[i] = string(st)
		}
		q += ` AND ` + s.db.In("state", "$3")
		args = append(args, s.db.Strings(filter))
	}
	rows, err := s.db.Read().QueryContext(ctx, q+` ORDER BY base_offset, created_at, segment_id`, args...)
	return Collect(s.db, rows, err, scanRemoteSegment, "list remote segments")
}
