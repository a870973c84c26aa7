package broker

import "github.com/sluicemq/sluice/tenants"

// rules are the access rules of the procedures a broker serves, as
// dataplane/access reads them, for the tests that check a procedure has one.
var rules = tenants.MustAccessRules(tenants.ServerBroker)
