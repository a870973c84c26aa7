package tenants

import (
	"errors"
	"fmt"
)

// Scopes a tenant API key (and the tokens minted from it) may carry.
const (
	// ScopeAdmin allows managing API keys and topics.
	ScopeAdmin = "admin"
	// ScopeProduce allows appending records to the tenant's topics.
	ScopeProduce = "produce"
	// ScopeConsume allows fetching records and managing consumer groups and offsets.
	ScopeConsume = "consume"
)

// AllScopes returns every known scope, in a stable order. The slice is a fresh copy.
func AllScopes() []string {
	return []string{ScopeAdmin, ScopeProduce, ScopeConsume}
}

// ErrInvalidScopes is wrapped by ValidateScopes errors.
var ErrInvalidScopes = errors.New("invalid scopes")

// ValidateScopes checks that s is a non-empty list of known scopes without duplicates or empty
// entries. The error wraps ErrInvalidScopes and names the first bad scope.
func ValidateScopes(s []string) error {
	if len(s) == 0 {
		return fmt.Errorf("%w: at least one scope is required", ErrInvalidScopes)
	}
	seen := make(map[string]bool, len(s))
	for _, sc := range s {
		switch {
		case sc == "":
			return fmt.Errorf("%w: empty scope", ErrInvalidScopes)
		case !knownScope(sc):
			return fmt.Errorf("%w: unknown scope %q (known: admin, produce, consume)", ErrInvalidScopes, sc)
		case seen[sc]:
			return fmt.Errorf("%w: duplicate scope %q", ErrInvalidScopes, sc)
		}
		seen[sc] = true
	}
	return nil
}

func knownScope(s string) bool {
	switch s {
	case ScopeAdmin, ScopeProduce, ScopeConsume:
		return true
	}
	return false
}
