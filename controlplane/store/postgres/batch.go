package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/controlplane/store"
)

// UpdatePartitions implements store.Store.
func (s *Store) UpdatePartitions(ctx context.Context, updates []store.PartitionUpdate) ([]error, error) {
	var out []error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = updatePartitions(ctx, tx, updates)
		return err
	})
	if err != nil {
		return nil, translate("update partitions", err)
	}
	return out, nil
}

// UpdatePartitionsFenced implements store.Store, fenced as
// UpdatePartitionFenced is: the lease row is read FOR SHARE first.
func (s *Store) UpdatePartitionsFenced(ctx context.Context, updates []store.PartitionUpdate, controllerEpoch int64) ([]error, error) {
	for _, u := range updates {
		if err := store.CheckFencedUpdate(u.Partition, u.ExpectedEpoch); err != nil {
			return nil, err
		}
	}
	var out []error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var epoch int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM controller_lease WHERE id = 1 FOR SHARE`).Scan(&epoch); err != nil {
			return err
		}
		if epoch != controllerEpoch {
			return store.ErrFenced
		}
		var err error
		out, err = updatePartitions(ctx, tx, updates)
		return err
	})
	if err != nil {
		return nil, translate("update partitions", err)
	}
	return out, nil
}

// updatePartitions is the batched compare-and-set inside tx. It first locks
// every named partition row in key order (one statement), which also reads
// their epochs; the writes then go out as one UPDATE of all of them.
// Locking the rows up front, in one order, before any write takes the
// metadata_version row (its trigger), keeps concurrent batches and
// single-row writers from deadlocking on each other. Its errors are
// untranslated.
func updatePartitions(ctx context.Context, tx pgx.Tx, updates []store.PartitionUpdate) ([]error, error) {
	type key struct {
		topic string
		part  int32
	}
	out := make([]error, len(updates))
	ids := make([]string, len(updates))
	var topics []string
	var nums []int32
	for i, u := range updates {
		id, ok := store.CanonicalID(u.Partition.TopicID)
		if !ok {
			out[i] = store.ErrNotFound
			continue
		}
		ids[i] = id
		topics, nums = append(topics, id), append(nums, u.Partition.Partition)
	}
	if len(topics) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx,
		`SELECT topic_id::text, partition, partition_epoch FROM partitions
		 WHERE (topic_id, partition) IN (SELECT t::uuid, n FROM unnest($1::text[], $2::integer[]) AS u(t, n))
		 ORDER BY topic_id, partition FOR UPDATE`, topics, nums)
	if err != nil {
		return nil, err
	}
	epochs := make(map[key]int32, len(topics))
	for rows.Next() {
		var (
			k key
			e int32
		)
		if err := rows.Scan(&k.topic, &k.part, &e); err != nil {
			rows.Close()
			return nil, err
		}
		epochs[k] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Each round is one UPDATE of many partitions (one bump of the metadata
	// version, migrations/00012); a partition named again in the batch goes
	// into the next round, compared with what the earlier update wrote.
	var rounds [][]int
	round := map[key]int{}
	for i, u := range updates {
		if out[i] != nil {
			continue
		}
		p := u.Partition
		k := key{ids[i], p.Partition}
		e, ok := epochs[k]
		switch {
		case !ok:
			out[i] = store.ErrNotFound
			continue
		case e != u.ExpectedEpoch:
			out[i] = store.ErrConflict
			continue
		}
		epochs[k] = p.PartitionEpoch
		r := round[k]
		round[k] = r + 1
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], i)
	}
	for _, idx := range rounds {
		n := len(idx)
		var (
			topic                          = make([]string, 0, n)
			part, leader, lepoch, pe, prev = make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
			replicas, isr                  = make([]string, 0, n), make([]string, 0, n)
		)
		for _, i := range idx {
			p := updates[i].Partition
			topic, part = append(topic, ids[i]), append(part, p.Partition)
			replicas, isr = append(replicas, arrayText(p.Replicas)), append(isr, arrayText(p.ISR))
			leader, lepoch, pe = append(leader, p.Leader), append(lepoch, p.LeaderEpoch), append(pe, p.PartitionEpoch)
			prev = append(prev, updates[i].ExpectedEpoch)
		}
		tag, err := tx.Exec(ctx,
			`UPDATE partitions p SET replicas = u.replicas::integer[], leader = u.leader, leader_epoch = u.leader_epoch,
			        isr = u.isr::integer[], partition_epoch = u.partition_epoch
			 FROM unnest($1::text[], $2::integer[], $3::text[], $4::integer[], $5::integer[], $6::text[], $7::integer[], $8::integer[])
			      AS u(topic_id, partition, replicas, leader, leader_epoch, isr, partition_epoch, expected)
			 WHERE p.topic_id = u.topic_id::uuid AND p.partition = u.partition AND p.partition_epoch = u.expected`,
			topic, part, replicas, leader, lepoch, isr, pe, prev)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() != int64(n) {
			return nil, fmt.Errorf("update partitions: %d of %d locked partitions updated", tag.RowsAffected(), n)
		}
	}
	return out, nil
}

// arrayText is v in PostgreSQL's array text form ("{1,2,3}").
func arrayText(v []int32) string {
	b := []byte{'{'}
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(x), 10)
	}
	return string(append(b, '}'))
}
