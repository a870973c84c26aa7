package record

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ControlType is the type of a control record: Kafka's ControlRecordType.
type ControlType int16

// Control record types.
const (
	ControlAbort  ControlType = 0 // an abort marker: the transaction's batches are dropped by read_committed readers
	ControlCommit ControlType = 1 // a commit marker: the transaction's batches become visible
)

func (t ControlType) String() string {
	switch t {
	case ControlAbort:
		return "abort"
	case ControlCommit:
		return "commit"
	}
	return fmt.Sprintf("control type %d", int16(t))
}

// ErrInvalidControlRecord: bytes that are not a control record of the
// format below, or a control batch that does not hold exactly one.
var ErrInvalidControlRecord = errors.New("invalid control record")

// Control record format (Kafka's, version 0), big-endian:
//
//	key:   version int16 (0), type int16 (0 abort, 1 commit)
//	value: version int16 (0), coordinator epoch int32
const (
	controlKeySize   = 2 + 2
	controlValueSize = 2 + 4
)

// ControlRecord is a transaction marker: the end of producer's transaction
// on one partition, written by the transaction coordinator.
type ControlRecord struct {
	Type ControlType
	// CoordinatorEpoch is the epoch of the coordinator that wrote the
	// marker, so that a partition can refuse markers of a coordinator that
	// was replaced.
	CoordinatorEpoch int32
}

// AppendKey appends the encoded key of c to dst.
func (c ControlRecord) AppendKey(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, 0)
	return binary.BigEndian.AppendUint16(dst, uint16(c.Type))
}

// AppendValue appends the encoded value of c to dst.
func (c ControlRecord) AppendValue(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, 0)
	return binary.BigEndian.AppendUint32(dst, uint32(c.CoordinatorEpoch))
}

// ParseControlRecord decodes the key and value of a control record. It
// fails with ErrInvalidControlRecord (never panics) on a wrong size, a
// version other than 0, or a type other than abort and commit.
func ParseControlRecord(key, value []byte) (ControlRecord, error) {
	if len(key) != controlKeySize {
		return ControlRecord{}, fmt.Errorf("control record key of %d bytes, want %d: %w", len(key), controlKeySize, ErrInvalidControlRecord)
	}
	if v := int16(binary.BigEndian.Uint16(key)); v != 0 {
		return ControlRecord{}, fmt.Errorf("control record key version %d: %w", v, ErrInvalidControlRecord)
	}
	t := ControlType(binary.BigEndian.Uint16(key[2:]))
	if t != ControlAbort && t != ControlCommit {
		return ControlRecord{}, fmt.Errorf("%v: %w", t, ErrInvalidControlRecord)
	}
	if len(value) != controlValueSize {
		return ControlRecord{}, fmt.Errorf("control record value of %d bytes, want %d: %w", len(value), controlValueSize, ErrInvalidControlRecord)
	}
	if v := int16(binary.BigEndian.Uint16(value)); v != 0 {
		return ControlRecord{}, fmt.Errorf("control record value version %d: %w", v, ErrInvalidControlRecord)
	}
	return ControlRecord{Type: t, CoordinatorEpoch: int32(binary.BigEndian.Uint32(value[2:]))}, nil
}

// MarkerBatch returns the header and the one record of a marker batch:
// attributes Control|Transactional, producer id and epoch, base sequence
// -1 (markers carry no sequence numbers), first timestamp timestampMs, the
// control record as key and value. Encode it with AppendBatch (or the
// log's EncodeLeaderBatch); the leader assigns the base offset and epoch.
func MarkerBatch(producerID int64, producerEpoch int16, timestampMs int64, c ControlRecord) (BatchHeader, []Record) {
	h := BatchHeader{
		Attributes:     AttrControl | AttrTransactional,
		FirstTimestamp: timestampMs,
		ProducerID:     producerID,
		ProducerEpoch:  producerEpoch,
		BaseSequence:   -1,
	}
	return h, []Record{{Key: c.AppendKey(nil), Value: c.AppendValue(nil)}}
}

// ReadControlRecord decodes the control record of a control batch (its
// CRC already checked, as by ReadBatch). It fails with
// ErrInvalidControlRecord when b is not a control batch, is compressed,
// or does not hold exactly one well-formed control record (malformed
// record framing also matches ErrCorrupt).
func ReadControlRecord(b Batch) (ControlRecord, error) {
	h := b.Header()
	if !h.Attributes.Control() {
		return ControlRecord{}, fmt.Errorf("batch at %d is not a control batch: %w", h.BaseOffset, ErrInvalidControlRecord)
	}
	if h.RecordCount != 1 {
		return ControlRecord{}, fmt.Errorf("control batch at %d holds %d records: %w", h.BaseOffset, h.RecordCount, ErrInvalidControlRecord)
	}
	var it RecordIter
	if err := it.Reset(b); err != nil {
		return ControlRecord{}, fmt.Errorf("control batch at %d: %w: %w", h.BaseOffset, ErrInvalidControlRecord, err)
	}
	if !it.Next() {
		err := it.Err()
		if err == nil {
			err = errors.New("no record")
		}
		return ControlRecord{}, fmt.Errorf("control batch at %d: %w: %w", h.BaseOffset, ErrInvalidControlRecord, err)
	}
	r := it.Record()
	c, err := ParseControlRecord(r.Key, r.Value)
	if err != nil {
		return ControlRecord{}, fmt.Errorf("control batch at %d: %w", h.BaseOffset, err)
	}
	if it.Next(); it.Err() != nil {
		return ControlRecord{}, fmt.Errorf("control batch at %d: %w: %w", h.BaseOffset, ErrInvalidControlRecord, it.Err())
	}
	return c, nil
}
