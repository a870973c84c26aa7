package broker

import (
	"github.com/sluicemq/sluice/dataplane/access"
	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
)

// toConnect maps the data plane's domain errors to Connect errors with
// details a client can act on: the one mapping (connecterr.ToConnect), for
// the broker's handlers and the NotLeader answers it builds itself.
func toConnect(err error) error { return connecterr.ToConnect(err) }

// notLeader builds the error for a partition this broker does not lead, as
// pm describes it (cluster.View.NotLeader).
func (b *Broker) notLeader(pm cluster.Partition) error { return b.metadata().NotLeader(b.cfg.ID, pm) }

// Names of dataplane/access the broker's handlers use.
const actForTenantHeader = access.ActForTenantHeader
