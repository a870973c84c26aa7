package connecterr

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// FromAlterPartitionsError translates one refused item of the control
// plane's AlterPartitions answer (its Connect code as text, its message,
// its StalePartitionEpoch) into a domain error, as FromConnect translates
// AlterPartition's error.
func FromAlterPartitionsError(e *sluicev1.AlterPartitionsError) error {
	var code connect.Code
	if code.UnmarshalText([]byte(e.GetCode())) != nil {
		code = connect.CodeUnknown
	}
	ce := connect.NewError(code, errors.New(e.GetMessage()))
	kind := KindOfCode(code)
	if e.GetStalePartitionEpoch() != nil {
		kind = derr.InvalidUpdateVersion
	}
	return &derr.Error{Kind: kind, Err: ce}
}

// CurrentPartition returns the PartitionAssignment detail of the control
// plane's refusal of an ISR change (the partition's current state), nil
// when it has none.
func CurrentPartition(err error) *sluicev1.PartitionAssignment {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	var current *sluicev1.PartitionAssignment
	for _, d := range ce.Details() {
		if v, verr := d.Value(); verr == nil {
			if pa, ok := v.(*sluicev1.PartitionAssignment); ok {
				current = pa
			}
		}
	}
	return current
}
