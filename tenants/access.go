package tenants

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Access rules (issue 30): who may call each RPC is declared once, on the
// RPC itself, with the (sluice.v1.access) method option of
// proto/sluice/v1/access.proto. The control plane and the brokers read the
// options from the compiled service descriptors when they start
// (AccessRules), so the two servers cannot disagree and a new RPC is
// refused everywhere until it says who may call it
// (TestAccessEveryRPCHasARule).

// Caller is who may call a procedure.
type Caller int

const (
	// CallerPublic: anyone, no credentials.
	CallerPublic Caller = iota + 1
	// CallerTenant: a tenant's token, with Rule.Scopes.
	CallerTenant
	// CallerOperator: the control plane's operator credential.
	CallerOperator
	// CallerBroker: the brokers' shared credential.
	CallerBroker
)

// Server is a kind of server a procedure is served by.
type Server int

const (
	ServerControlPlane Server = iota + 1
	ServerBroker
)

// Rule is the access rule of one procedure.
type Rule struct {
	Caller Caller
	// Scopes a tenant's token must all have (none: any scope).
	Scopes []string
	// BrokerForTenant: a broker may also call it with the broker credential
	// for the tenant named in a header (CallerTenant only).
	BrokerForTenant bool
	// ServedBy lists the servers that serve it.
	ServedBy []Server
}

// Serves reports whether s serves the procedure.
func (r Rule) Serves(s Server) bool { return slices.Contains(r.ServedBy, s) }

// accessPackage is the proto package whose services the rules cover.
const accessPackage = "sluice.v1"

// AllAccessRules returns the rule of every procedure of every service of
// package sluice.v1, keyed by procedure ("/sluice.v1.RecordService/Produce"),
// read from the services' (sluice.v1.access) options. It fails, naming
// each, for a procedure without a rule or with a malformed one (no caller,
// no server, an unknown scope, scopes or broker_for_tenant on a caller
// that is not a tenant).
func AllAccessRules() (map[string]Rule, error) {
	rules := map[string]Rule{}
	var errs []error
	protoregistry.GlobalFiles.RangeFilesByPackage(accessPackage, func(fd protoreflect.FileDescriptor) bool {
		svcs := fd.Services()
		for i := range svcs.Len() {
			methods := svcs.Get(i).Methods()
			for j := range methods.Len() {
				md := methods.Get(j)
				proc := "/" + string(svcs.Get(i).FullName()) + "/" + string(md.Name())
				a, _ := proto.GetExtension(md.Options(), sluicev1.E_Access).(*sluicev1.Access)
				if !proto.HasExtension(md.Options(), sluicev1.E_Access) {
					a = nil
				}
				r, err := ruleOf(a)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", proc, err))
					continue
				}
				rules[proc] = r
			}
		}
		return true
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("access rules: %w", err)
	}
	return rules, nil
}

// AccessRules returns the rules of the procedures server serves (see
// AllAccessRules). A server refuses every procedure not in them.
func AccessRules(server Server) (map[string]Rule, error) {
	all, err := AllAccessRules()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Rule, len(all))
	for proc, r := range all {
		if r.Serves(server) {
			out[proc] = r
		}
	}
	return out, nil
}

// MustAccessRules is AccessRules for a server's start: the rules are
// compiled in, so an error is a programming error (and fails
// TestAccessEveryRPCHasARule first).
func MustAccessRules(server Server) map[string]Rule {
	rules, err := AccessRules(server)
	if err != nil {
		panic(err)
	}
	return rules
}

// ruleOf checks a procedure's option (nil: it has none) and returns its
// rule.
func ruleOf(a *sluicev1.Access) (Rule, error) {
	if a == nil {
		return Rule{}, errors.New("no (sluice.v1.access) option")
	}
	var r Rule
	switch a.GetCaller() {
	case sluicev1.Caller_CALLER_PUBLIC:
		r.Caller = CallerPublic
	case sluicev1.Caller_CALLER_TENANT:
		r.Caller = CallerTenant
	case sluicev1.Caller_CALLER_OPERATOR:
		r.Caller = CallerOperator
	case sluicev1.Caller_CALLER_BROKER:
		r.Caller = CallerBroker
	default:
		return Rule{}, fmt.Errorf("caller %v: want a caller", a.GetCaller())
	}
	if len(a.GetScopes()) > 0 {
		if r.Caller != CallerTenant {
			return Rule{}, errors.New("scopes are for a tenant caller")
		}
		if err := ValidateScopes(a.GetScopes()); err != nil {
			return Rule{}, err
		}
		r.Scopes = slices.Clone(a.GetScopes())
	}
	if a.GetBrokerForTenant() {
		if r.Caller != CallerTenant {
			return Rule{}, errors.New("broker_for_tenant is for a tenant caller")
		}
		r.BrokerForTenant = true
	}
	for _, s := range a.GetServedBy() {
		switch s {
		case sluicev1.Server_SERVER_CONTROL_PLANE:
			r.ServedBy = append(r.ServedBy, ServerControlPlane)
		case sluicev1.Server_SERVER_BROKER:
			r.ServedBy = append(r.ServedBy, ServerBroker)
		default:
			return Rule{}, fmt.Errorf("served_by %v: want a server", s)
		}
	}
	if len(r.ServedBy) == 0 {
		return Rule{}, errors.New("served_by names no server")
	}
	return r, nil
}
