package nccl

import (
	"encoding/hex"

	"github.com/gonccl/nccl/abi"
)

// UniqueIDBytes is the size of a UniqueID (NCCL_UNIQUE_ID_BYTES).
const UniqueIDBytes = abi.UniqueIDBytes

// UniqueID is the 128-byte ncclUniqueId that ranks share to form a communicator.
// Its text form is 256 hex digits.
type UniqueID abi.UniqueID

// GetUniqueID creates an id. Without NCCL_COMM_ID it also starts NCCL's bootstrap
// root in this process; with NCCL_COMM_ID=host:port every rank gets the same id
// from that address and nothing is started.
func (l *Library) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if l == nil {
		return id, nilLibrary("GetUniqueID")
	}
	if err := l.live("ncclGetUniqueId"); err != nil {
		return id, err
	}
	err := l.nc.GetUniqueId((*abi.UniqueID)(&id))
	return id, err
}

// String is the text form: 256 lowercase hex digits.
func (id UniqueID) String() string { return hex.EncodeToString(id.Internal[:]) }

// MarshalText implements encoding.TextMarshaler.
func (id UniqueID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *UniqueID) UnmarshalText(b []byte) error {
	if id == nil {
		return argError("UnmarshalText", "nil *UniqueID")
	}
	v, err := ParseUniqueID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// MarshalBinary returns the 128 bytes.
func (id UniqueID) MarshalBinary() ([]byte, error) {
	return append([]byte(nil), id.Internal[:]...), nil
}

// UnmarshalBinary takes exactly 128 bytes; another length is an error
// matching ErrInvalidArgument.
func (id *UniqueID) UnmarshalBinary(b []byte) error {
	if len(b) != abi.UniqueIDBytes {
		return argError("UnmarshalBinary", "unique id is %d bytes, want %d", len(b), abi.UniqueIDBytes)
	}
	if id == nil {
		return argError("UnmarshalBinary", "nil *UniqueID")
	}
	copy(id.Internal[:], b)
	return nil
}

// ParseUniqueID reads the text form (256 hex digits; surrounding white space is
// ignored).
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	s = trimSpace(s)
	if len(s) != 2*abi.UniqueIDBytes {
		return id, argError("ParseUniqueID", "unique id text is %d characters, want %d hex digits", len(s), 2*abi.UniqueIDBytes)
	}
	if _, err := hex.Decode(id.Internal[:], []byte(s)); err != nil {
		return UniqueID{}, argError("ParseUniqueID", "unique id text: %v", err)
	}
	return id, nil
}

func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\n' || s[0] == '\t' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\n' || s[len(s)-1] == '\t' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}
