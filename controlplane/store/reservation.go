package store

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Count reservations (issue 29, docs/quotas-and-billing.md "Count limits").
// A tenant's groups and transactional ids are created by the brokers'
// coordinators, not here, and counted from the brokers' quota reports. To
// keep a burst of creations over several brokers within the limit, a
// coordinator reserves each new name before creating it: the store decides
// the tenant's reservations one transaction at a time (the tenant row
// locked, as for topics), granting a name when it is pending already or
// when the tenant's reported count plus its pending names is below the
// limit, and keeps a granted name pending until the reserving broker's
// next quota report confirms it (written in the same transaction, so a
// confirmed name is counted by the report instead) or its TTL passes.

// ObjectKind is a kind of named object counted against a tenant's limit
// (the proto's CountedKind).
type ObjectKind string

// The counted kinds.
const (
	ObjectGroup           ObjectKind = "group"
	ObjectTransactionalID ObjectKind = "transactional_id"
)

// Valid reports whether k is one of the counted kinds.
func (k ObjectKind) Valid() bool { return k == ObjectGroup || k == ObjectTransactionalID }

// MaxObjectName bounds a reserved name (the brokers' bound on group and
// transactional ids).
const MaxObjectName = 255

// MaxReservations bounds the reservations of one ReserveObjects and the
// confirmations of one PutQuotaReports.
const MaxReservations = 10000

// ObjectReservation is one new named object a broker reserves, or confirms
// it has applied. Token is the broker's, different for every reservation:
// a confirmation ends only the grant with its token.
type ObjectReservation struct {
	TenantID string
	Kind     ObjectKind
	Name     string
	Token    int64
}

// Reservations is one tenant's part of a ReserveObjects call.
type Reservations struct {
	TenantID string
	BrokerID int32
	// At is the decision's time: pending names granted until At are
	// counted, a name granted now is pending until At + TTL.
	At  time.Time
	TTL time.Duration
	// ReportedAfter: only quota reports stamped after it count (the
	// fresh reports, as the control plane sums them for allotments).
	ReportedAfter time.Time
	// Limits per kind; a kind without one allows nothing.
	Limits map[ObjectKind]int64
	// Objects, decided in order (their TenantID is ignored).
	Objects []ObjectReservation
}

// ReservationResult is the decision of one reservation: granted or not,
// and the tenant's count of the kind (reported plus pending) and limit
// when it was decided.
type ReservationResult struct {
	Granted bool
	Count   int64
	Limit   int64
}

// CheckReservations validates a tenant's reservations: a UUID tenant,
// a broker id, a time, a positive TTL, at most MaxReservations objects of
// counted kinds with names of 1 to MaxObjectName bytes of valid UTF-8
// without NUL. Returns them with the canonical tenant id.
func CheckReservations(r Reservations) (Reservations, error) {
	id, err := CheckNewID("tenant", r.TenantID)
	if err != nil {
		return Reservations{}, fmt.Errorf("invalid reservations: %w", err)
	}
	switch {
	case r.BrokerID < 0:
		return Reservations{}, fmt.Errorf("invalid reservations: broker id %d", r.BrokerID)
	case r.At.IsZero() || r.TTL <= 0:
		return Reservations{}, fmt.Errorf("invalid reservations: time %v, ttl %v", r.At, r.TTL)
	case len(r.Objects) > MaxReservations:
		return Reservations{}, fmt.Errorf("invalid reservations: %d, at most %d", len(r.Objects), MaxReservations)
	}
	for _, o := range r.Objects {
		if err := checkObject(o); err != nil {
			return Reservations{}, fmt.Errorf("invalid reservations: %w", err)
		}
	}
	r.TenantID = id
	return r, nil
}

// CheckConfirmations validates a broker's confirmations (PutQuotaReports'
// applied): at most MaxReservations, UUID tenants, valid objects. Returns
// them with canonical tenant ids.
func CheckConfirmations(applied []ObjectReservation) ([]ObjectReservation, error) {
	if len(applied) > MaxReservations {
		return nil, fmt.Errorf("invalid confirmations: %d, at most %d", len(applied), MaxReservations)
	}
	out := make([]ObjectReservation, len(applied))
	for i, o := range applied {
		id, err := CheckNewID("tenant", o.TenantID)
		if err != nil {
			return nil, fmt.Errorf("invalid confirmation: %w", err)
		}
		if err := checkObject(o); err != nil {
			return nil, fmt.Errorf("invalid confirmation: %w", err)
		}
		o.TenantID = id
		out[i] = o
	}
	return out, nil
}

func checkObject(o ObjectReservation) error {
	switch {
	case !o.Kind.Valid():
		return fmt.Errorf("kind %q", o.Kind)
	case o.Name == "" || len(o.Name) > MaxObjectName:
		return fmt.Errorf("%s name of %d bytes: 1 to %d", o.Kind, len(o.Name), MaxObjectName)
	case !utf8.ValidString(o.Name) || strings.ContainsRune(o.Name, 0):
		return fmt.Errorf("%s name %q: not valid UTF-8 text", o.Kind, o.Name)
	}
	return nil
}

// DecideReservations decides objects in order against limits, given what
// the tenant's fresh reports count of each kind (reported) and the names
// pending (reserved, not yet confirmed, not expired): a name pending
// already is granted again (it is one object, counted once); another is
// granted while reported + pending of its kind is below its limit, and is
// then pending too (pending is updated). Each result carries the count and
// limit it was decided against.
func DecideReservations(limits, reported map[ObjectKind]int64, pending map[ObjectKind]map[string]bool, objects []ObjectReservation) []ReservationResult {
	out := make([]ReservationResult, len(objects))
	for i, o := range objects {
		names := pending[o.Kind]
		if names == nil {
			names = map[string]bool{}
			pending[o.Kind] = names
		}
		count := reported[o.Kind] + int64(len(names))
		limit := limits[o.Kind]
		r := ReservationResult{Count: count, Limit: limit}
		switch {
		case names[o.Name]:
			r.Granted = true
		case count < limit:
			r.Granted = true
			names[o.Name] = true
		}
		out[i] = r
	}
	return out
}
