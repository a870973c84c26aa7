package broker

import "context"

// AdmitGroup is the admission of a new group (groups.Admission), by the
// name the admission package's Enforcer gives it; a shim over admitGroup
// until that package lands.
func (b *Broker) AdmitGroup(ctx context.Context, tenantID, group string) (func(), error) {
	return b.admitGroup(ctx, tenantID, group)
}
