package derr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKindsAreErrors(t *testing.T) {
	cause := errors.New("the ISR has 1 member")
	err := fmt.Errorf("produce: %w", &Error{Kind: NotEnoughReplicas, Err: cause, Replicas: &ReplicaCount{ISR: 1, MinISR: 2}})
	require.ErrorIs(t, err, NotEnoughReplicas)
	require.NotErrorIs(t, err, NotLeaderOrFollower)
	require.ErrorIs(t, err, cause)
	k, ok := KindOf(err)
	require.True(t, ok)
	require.Equal(t, NotEnoughReplicas, k)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 1, e.Replicas.ISR)
	require.Equal(t, cause.Error(), e.Error(), "the message is the cause's, unchanged")

	_, ok = KindOf(errors.New("plain"))
	require.False(t, ok)
	require.Nil(t, Wrap(Unavailable, nil))
	require.Equal(t, "offset 3: gone", New(OffsetOutOfRange, "offset %d: %w", 3, errors.New("gone")).Error())
}

func TestKindNames(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds() {
		require.NotEmpty(t, k.String(), "kind %d has no name", k)
		require.False(t, seen[k.String()], "two kinds named %s", k)
		seen[k.String()] = true
	}
	require.Equal(t, "NotLeaderOrFollower", NotLeaderOrFollower.Error())
	require.Equal(t, "kind 200", Kind(200).String())
}

func TestNotLeaderError(t *testing.T) {
	nl := &NotLeaderError{TopicID: "t", Partition: 1, Leader: 3, Epoch: 4, Address: "b3"}
	require.Equal(t, NotLeaderOrFollower, nl.ErrorKind())
	require.ErrorIs(t, fmt.Errorf("x: %w", nl), NotLeaderOrFollower)
	require.Equal(t, "not the leader: broker 3 (b3) leads at epoch 4 (topic t partition 1)", nl.Error())
	require.Equal(t, LeaderNotAvailable, (&NotLeaderError{Leader: -1}).ErrorKind())
	require.Equal(t, "partition is offline: no in-sync replica is alive", (&NotLeaderError{Leader: -1}).Error())
	require.Equal(t, LeaderNotAvailable, (&NotLeaderError{Leader: 1, Self: true}).ErrorKind())
}

// TestOutermost: the first domain error, or error also accepts, in the
// order errors.As visits the tree.
func TestOutermost(t *testing.T) {
	inner := New(Unavailable, "inner")
	outer := New(NotFound, "outer: %w", inner)
	require.Same(t, outer, Outermost(fmt.Errorf("w: %w", outer), nil))
	marker := errors.New("adapter's")
	wrapped := fmt.Errorf("m: %w", fmt.Errorf("%w, %w", marker, inner))
	require.Equal(t, marker, Outermost(wrapped, func(err error) bool { return err == marker }))
	require.Same(t, inner, Outermost(wrapped, nil))
	require.Nil(t, Outermost(errors.New("none"), nil))
}
