// Package billing prices metered usage and keeps invoices (DESIGN.md §9,
// docs/quotas-and-billing.md).
//
// Usage is metered elsewhere into the store's hourly rows
// (controlplane/store/usage.go: brokers' reports applied exactly once, the
// control plane's interval meters); this package turns a month of those
// rows into an invoice and runs the job that keeps invoices current.
//
// # Money
//
// Money is integers, never floats: a price is micros (millionths of the
// currency) per billing unit, an amount is minor units of the currency
// (cents). A line's amount is billable / unit_size × unit_price_micros,
// converted to minor units and rounded half to even, computed exactly in
// math/big (a month of byte-seconds can pass int64 before it is divided
// down to units); the invoice's total is the sum of its lines' amounts.
//
// # Prices
//
// Every plan has default prices per dimension (DefaultPrices), with a
// monthly free allowance. An operator overrides them per plan and
// dimension (OperatorService.SetPlanPrices → SetPlanPrices, stored by the
// store); Prices answers the defaults overlaid with what was stored. The
// unit and unit size of each dimension are fixed (Units).
//
// # Invoices
//
// One invoice per tenant per calendar month (UTC), none for the system
// tenant (Sluice's internal topics). Job.RunOnce, which the control plane
// calls periodically, recomputes the draft of the current month (and of
// the previous one while it ended less than Grace ago, DefaultGrace an
// hour: the interval meters add a month's last minutes after it ended)
// for every tenant with usage in it, and finalizes every draft of a month
// that ended at least Grace ago, and the previous month of every tenant
// with usage in it that has no finalized invoice yet: the lines are
// computed a last time, the invoice becomes immutable (the store never
// writes a finalized row again, so later usage of that month, which only
// skewed clocks can record, and price changes do not change it), and an
// invoice.finalized webhook delivery (EventPayload) is enqueued for each of
// the tenant's webhooks in the finalizing transaction, delivered signed by
// the control plane's webhook sender as alerts are.
package billing
