// Package limit is the one table of a tenant's limits: for each, its name
// (the one spelling used in JSON, the proto, QuotaFailure descriptions,
// metrics and, with '-' for '_', the CLI's flags), how it is enforced
// (Kind), its unit, the plans' defaults, the range an override may set and
// what it is charged on. The rate limits each have a Dimension, the index
// of the brokers' token buckets (dataplane/quota), the control plane's
// division of the cluster-wide limits (controlplane/quota) and the quota
// exchange's rates.
//
// Everything else reads the table: the plans (tenants), the store's
// override documents (JSON keyed by name), the proto's values maps
// (limit/limitpb), the brokers' refusals and metrics, the CLI's flags and
// tenant get, and the docs (a test checks docs/quotas-and-billing.md
// names every limit). So a new rate dimension is a Dimension, its Rate row
// with the plans' defaults here, its docs, and the code that charges it at
// the broker.
//
// It is a leaf: the standard library only, so that both planes and the
// pure quota packages may import it.
package limit
