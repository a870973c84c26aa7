package store

import (
	"fmt"
	"time"
)

// AlertPolicy is a tenant's alert thresholds: a tenant without a stored
// policy has the control plane's defaults.
type AlertPolicy struct {
	TenantID string
	// ExpiryRiskThreshold: retention-expiry-risk fires when the time to
	// data loss is below it.
	ExpiryRiskThreshold time.Duration
	UpdatedAt           time.Time
}

// The bounds of AlertPolicy.ExpiryRiskThreshold, and its default.
const (
	DefaultExpiryRiskThreshold = 24 * time.Hour
	MinExpiryRiskThreshold     = time.Minute
	MaxExpiryRiskThreshold     = 90 * 24 * time.Hour
)

// CheckAlertPolicy validates a policy about to be stored: a UUID tenant
// and a threshold of whole milliseconds in [MinExpiryRiskThreshold,
// MaxExpiryRiskThreshold]. It returns the policy with a canonical tenant id.
func CheckAlertPolicy(p AlertPolicy) (AlertPolicy, error) {
	var err error
	if p.TenantID, err = CheckNewID("tenant", p.TenantID); err != nil {
		return AlertPolicy{}, err
	}
	d := p.ExpiryRiskThreshold
	switch {
	case d < MinExpiryRiskThreshold || d > MaxExpiryRiskThreshold:
		return AlertPolicy{}, fmt.Errorf("invalid alert policy: expiry-risk threshold %s is not between %s and %s", d, MinExpiryRiskThreshold, MaxExpiryRiskThreshold)
	case d%time.Millisecond != 0:
		return AlertPolicy{}, fmt.Errorf("invalid alert policy: expiry-risk threshold %s is not whole milliseconds", d)
	}
	return p, nil
}
