package controller

import (
	"context"
	"slices"

	"github.com/sluicemq/sluice/controlplane/store"
)

// view is the active controller's copy of every partition's state, with
// what it needs of each topic (its name, for logs, and whether it opted in
// to unclean leader election), as of the metadata version version.
//
// It is read once whole (load) and then kept up to date with what changed
// (apply, from store.MetadataChangesSince) and with the controller's own
// successful writes (set). Every row a delta carries is the row as it is
// at the delta's version, so applying a change the view already holds (a
// write of the controller's own, a row also in the snapshot) is harmless.
type view struct {
	version int64
	parts   []store.Partition
	index   map[partKey]int // into parts
	names   map[string]string
	unclean map[string]bool
	// gen counts the changes to parts and unclean: equal gens, equal
	// partitions.
	gen uint64
}

type partKey struct {
	topic string
	part  int32
}

// load reads every partition. The version is read first: a change
// committed after that read is in the snapshot or not, but in either case
// it is stamped after the version, so the first apply brings it (as it is
// then); a change stamped at or before the version committed before it was
// read, so the snapshot holds it.
func load(ctx context.Context, s store.Store) (*view, error) {
	version, err := s.MetadataVersion(ctx)
	if err != nil {
		return nil, err
	}
	all, err := s.ListAllPartitions(ctx)
	if err != nil {
		return nil, err
	}
	v := &view{
		version: version,
		parts:   make([]store.Partition, 0, len(all)),
		index:   make(map[partKey]int, len(all)),
		names:   map[string]string{},
		unclean: map[string]bool{},
	}
	v.upsert(all)
	return v, nil
}

// apply brings the view to ch.Version: the topics deleted go, the
// partitions listed are added or replaced.
func (v *view) apply(ch store.MetadataChanges) {
	v.version = ch.Version
	if len(ch.DeletedTopics) == 0 && len(ch.Partitions) == 0 {
		return
	}
	if len(ch.DeletedTopics) > 0 {
		gone := make(map[string]bool, len(ch.DeletedTopics))
		for _, id := range ch.DeletedTopics {
			gone[id] = true
			delete(v.names, id)
			delete(v.unclean, id)
		}
		v.parts = slices.DeleteFunc(v.parts, func(p store.Partition) bool { return gone[p.TopicID] })
		clear(v.index)
		for i, p := range v.parts {
			v.index[partKey{p.TopicID, p.Partition}] = i
		}
	}
	v.upsert(ch.Partitions)
	v.gen++
}

func (v *view) upsert(ps []store.PartitionWithTopic) {
	for _, p := range ps {
		v.names[p.TopicID] = p.TopicName
		if p.Config.UncleanLeaderElection {
			v.unclean[p.TopicID] = true
		} else {
			delete(v.unclean, p.TopicID)
		}
		v.put(p.Partition)
	}
}

// set records a partition state the controller wrote.
func (v *view) set(p store.Partition) {
	v.put(p)
	v.gen++
}

func (v *view) put(p store.Partition) {
	k := partKey{p.TopicID, p.Partition}
	if i, ok := v.index[k]; ok {
		v.parts[i] = p
		return
	}
	v.index[k] = len(v.parts)
	v.parts = append(v.parts, p)
}
