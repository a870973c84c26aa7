package groups

import (
	"context"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
)

// Groups of Kafka's classic protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup): the coordinator's group.Classic beside the consumer
// protocol's groups, with the same committed offsets. The state
// machine's refusals (group.ErrMemberIDRequired, ErrRebalanceInProgress,
// ErrIllegalGeneration, ErrInconsistentProtocol, ErrInvalidSessionTimeout,
// ErrGroupFull, and the membership errors both protocols share) are
// answered as they are, wrapped: only the Kafka listener calls these, and
// maps them.

// JoinRequest is a JoinGroup of a tenant's group.
type JoinRequest struct {
	TenantID, Group string
	Member          group.JoinRequest
}

// JoinGroup runs a JoinGroup at the group's coordinator, creating the
// group on first use (if admitted), and waits (up to ctx) for its join
// phase to end. The answer's MemberID is set with ErrMemberIDRequired.
func (s *Service) JoinGroup(ctx context.Context, req JoinRequest) (group.JoinResponse, error) {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return group.JoinResponse{}, err
	}
	switch {
	case len(req.Member.MemberID) > MaxGroupName, len(req.Member.InstanceID) > MaxGroupName:
		return group.JoinResponse{}, derr.New(derr.InvalidRequest, "member id and group instance id: at most %d bytes", MaxGroupName)
	case len(req.Member.Protocols) > 64:
		return group.JoinResponse{}, derr.New(derr.InvalidRequest, "protocols: at most 64; got %d", len(req.Member.Protocols))
	}
	res, err := c.JoinClassic(ctx, s.deps.Now(), req.TenantID, req.Group, req.Member)
	if err == nil {
		err = res.Err
	}
	return res, groupError(err)
}

// SyncGroup runs a SyncGroup at the group's coordinator and waits (up to
// ctx) for the leader's assignment.
func (s *Service) SyncGroup(ctx context.Context, tenantID, groupID string, req group.SyncRequest) (group.SyncResponse, error) {
	c, err := s.call(ctx, tenantID, groupID)
	if err != nil {
		return group.SyncResponse{}, err
	}
	res, err := c.SyncClassic(ctx, s.deps.Now(), tenantID, groupID, req)
	if err == nil {
		err = res.Err
	}
	return res, groupError(err)
}

// HeartbeatClassic runs a classic member's Heartbeat: nil, or why it
// must join again.
func (s *Service) HeartbeatClassic(ctx context.Context, tenantID, groupID, memberID, instanceID string, generation int32) error {
	c, err := s.call(ctx, tenantID, groupID)
	if err != nil {
		return err
	}
	return groupError(c.HeartbeatClassic(s.deps.Now(), tenantID, groupID, memberID, instanceID, generation))
}

// LeaveClassic removes a classic member (by member id, or a static one
// by instance id alone); the others rebalance.
func (s *Service) LeaveClassic(ctx context.Context, tenantID, groupID, memberID, instanceID string) error {
	c, err := s.call(ctx, tenantID, groupID)
	if err != nil {
		return err
	}
	return groupError(c.LeaveClassic(s.deps.Now(), tenantID, groupID, memberID, instanceID))
}

// DescribeClassic returns a group's classic membership (DescribeGroups):
// GroupIDNotFound for a group whose members use the consumer protocol;
// an empty group (State Empty, no members) when the coordinator has no
// classic members of it.
func (s *Service) DescribeClassic(ctx context.Context, tenantID, groupID string) (group.ClassicDescription, error) {
	c, err := s.call(ctx, tenantID, groupID)
	if err != nil {
		return group.ClassicDescription{}, err
	}
	now := s.deps.Now()
	d, ok := c.DescribeClassic(now, tenantID, groupID)
	if (!ok || len(d.Members) == 0) && c.Active(now, tenantID, groupID) {
		return group.ClassicDescription{}, derr.New(derr.GroupIDNotFound, "group %q is not a classic group: its members use the consumer protocol (KIP-848); describe it with ConsumerGroupDescribe", groupID)
	}
	if !ok {
		d = group.ClassicDescription{State: group.ClassicEmpty}
	}
	return d, nil
}
