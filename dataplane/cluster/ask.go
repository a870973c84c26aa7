package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/tenants/system"
)

// AskLeaders answers a list request that every coordinator of an internal
// topic (the groups' offsets topic, the transaction-state topic) answers
// for its own partitions: it asks every broker leading a partition of
// topic in v at once, self through local and the others through remote,
// and returns their items sorted by key, without the duplicates a
// leadership move can give (two brokers both answering for one key). A
// partition without a leader, or a broker that fails, fails the list
// (Unavailable, named what): it would be incomplete. errNoTopic is the
// answer while v has no such topic.
func AskLeaders[T any](v *View, self int32, topic string, errNoTopic error, what string,
	local func() ([]T, error), remote func(id int32) ([]T, error), key func(T) string,
) ([]T, error) {
	t, ok := v.Topic(system.TenantID, topic)
	if !ok {
		return nil, errNoTopic
	}
	leaders := map[int32]bool{}
	for _, pm := range t.Partitions {
		if pm.Leader < 0 {
			return nil, v.NotLeader(self, pm) // a coordinator is offline
		}
		leaders[pm.Leader] = true
	}
	var (
		mu   sync.Mutex
		all  []T
		errs []error
		wg   sync.WaitGroup
	)
	for id := range leaders {
		wg.Go(func() {
			ask := local
			if id != self {
				ask = func() ([]T, error) { return remote(id) }
			}
			out, err := ask()
			mu.Lock()
			defer mu.Unlock()
			all = append(all, out...)
			if err != nil {
				errs = append(errs, fmt.Errorf("broker %d: %w", id, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, derr.New(derr.Unavailable, "%s: %w", what, errors.Join(errs...))
	}
	slices.SortFunc(all, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	return slices.CompactFunc(all, func(a, b T) bool { return key(a) == key(b) }), nil
}

// Led returns at's answer for every partition of the internal topic that
// self leads in v (its coordinators there), in partition order;
// errNoTopic while v has no such topic.
func Led[T any](v *View, self int32, topic string, errNoTopic error, at func(*Topic, Partition) (T, error)) ([]T, error) {
	t, ok := v.Topic(system.TenantID, topic)
	if !ok {
		return nil, errNoTopic
	}
	var out []T
	for _, pm := range t.Partitions {
		if pm.Leader != self {
			continue
		}
		c, err := at(t, pm)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
