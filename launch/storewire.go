package launch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The wire protocol of PyTorch's c10d TCPStore, client side, as read from
// PyTorch's sources (torch/csrc/distributed/c10d/):
//
//   - TCPStore.cpp, class SendBuffer: a request is one query-type byte, then
//     its arguments; a string or a byte vector is its length as a uint64 then
//     its bytes; a number is its bytes. Everything is in the host's byte order,
//     little-endian on amd64 and arm64. Keys carry the prefix "/" (keyPrefix_
//     in TCPStore.hpp), so Python's store.get("k") asks the server for "/k".
//   - TCPStoreBackend.hpp: the query types (enum QueryType), with VALIDATE = 0
//     first since the release that added it; CheckResponseType READY = 0,
//     NOT_READY = 1; WaitResponseType STOP_WAITING = 0, WAIT_CANCELED = 1;
//     validationMagicNumber = 0x3C85F7CE.
//   - TCPStore.cpp, TCPStore::TCPStore: a client's first query is VALIDATE with
//     the magic as a uint32 (no reply), then PING with a uint32 nonce that the
//     server echoes. TCPStoreLibUvBackend.cpp (the default server since 2.4)
//     answers nothing to a client whose first query is not VALIDATE;
//     TCPStoreBackend.cpp closes its connection.
//   - Older servers (PyTorch 1.13, measured with Debian's python3-torch
//     1.13.1): no VALIDATE and every query type one lower (SET = 0, GET = 2,
//     ADD = 3, CHECK = 4, WAIT = 5, GETNUMKEYS = 6), no CANCEL_WAIT or PING.
//     Dial tells the two apart (see handshake).

// protocol is the generation of the server's query types.
type protocol int

const (
	protoCurrent protocol = iota // VALIDATE first: PyTorch 2.x to now (2.11 included)
	protoLegacy                  // no VALIDATE: PyTorch 1.13 and the releases before VALIDATE
)

// Query types (TCPStoreBackend.hpp, enum QueryType).
const (
	qValidate byte = iota
	qSet
	qCompareSet
	qGet
	qAdd
	qCheck
	qWait
	qGetNumKeys
	qDeleteKey
	qAppend
	qMultiGet
	qMultiSet
	qCancelWait
	qPing
)

// code returns the byte that means query q to a server of protocol p: one
// lower on legacy servers, which lack VALIDATE at 0. Only the queries this
// client sends (SET to GETNUMKEYS, CANCEL_WAIT and PING on current servers)
// are asked for.
func (p protocol) code(q byte) byte {
	if p == protoLegacy {
		return q - 1
	}
	return q
}

// Replies (TCPStoreBackend.hpp).
const (
	checkReady      = 0 // CheckResponseType::READY
	checkNotReady   = 1 // CheckResponseType::NOT_READY
	waitStopWaiting = 0 // WaitResponseType::STOP_WAITING
	waitCanceled    = 1 // WaitResponseType::WAIT_CANCELED
)

// validationMagic is validationMagicNumber (TCPStoreBackend.hpp).
const validationMagic uint32 = 0x3C85F7CE

// keyPrefix is what PyTorch's TCPStore puts before every key (TCPStore.hpp).
const keyPrefix = "/"

// maxValue bounds a value this client accepts. PyTorch's libuv server refuses
// payloads over 8 MiB (MAX_PAYLOAD_LEN); a length far beyond is garbage.
const maxValue = 64 << 20

// maxKey bounds a key: the libuv server closes the connection of a client
// that sends a longer one (MAX_STRING_LEN, 8 KiB).
const maxKey = 8 << 10

// ErrProtocol matches every error for a reply that PyTorch's TCPStore server
// would not send: the peer is not a TCPStore, or not one this client knows.
var ErrProtocol = errors.New("reply outside PyTorch's TCPStore protocol")

// ProtocolError is a reply that PyTorch's TCPStore server would not send.
// errors.Is(err, ErrProtocol) matches it.
type ProtocolError struct {
	Query string // the query answered: "get", "handshake", ...
	Msg   string // what was wrong with the reply
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("reply to %s: %s (%v)", e.Query, e.Msg, ErrProtocol)
}

// Is reports whether target is ErrProtocol.
func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// request builds one query.
type request struct{ b []byte }

func newRequest(p protocol, q byte) *request {
	return &request{b: []byte{p.code(q)}}
}

func (r *request) u32(v uint32) *request { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *request) u64(v uint64) *request { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }

// bytes appends a length-prefixed string or vector (SendBuffer::appendString,
// appendBytes: the size as a uint64).
func (r *request) bytes(s []byte) *request {
	r.u64(uint64(len(s)))
	r.b = append(r.b, s...)
	return r
}

func (r *request) key(k string) *request { return r.bytes([]byte(keyPrefix + k)) }

// keys appends a count (a uint64: keys.size() appended as a size_t) and the
// keys, as CHECK and WAIT send them.
func (r *request) keys(ks []string) *request {
	r.u64(uint64(len(ks)))
	for _, k := range ks {
		r.key(k)
	}
	return r
}

// The reply decoders read one reply of each kind. Each returns a
// *ProtocolError for a reply no PyTorch server sends, and the reader's error
// (io.EOF, a deadline, ...) when the reply stops short.

// readValue reads a byte vector: a uint64 length, then that many bytes
// (tcputil::recvVector on the client, StreamWriter::write_vector on the server).
func readValue(r *bufio.Reader, query string) ([]byte, error) {
	n, err := readU64(r)
	if err != nil {
		return nil, err
	}
	if n > maxValue {
		return nil, &ProtocolError{query, fmt.Sprintf("a value of %d bytes (at most %d expected)", n, maxValue)}
	}
	var buf bytes.Buffer // grows as bytes arrive: garbage costs no large allocation
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, shortReply(err)
	}
	return buf.Bytes(), nil
}

// readCount reads an int64 that must be a count, as GETNUMKEYS answers.
func readCount(r *bufio.Reader, query string) (int64, error) {
	v, err := readU64(r)
	if err != nil {
		return 0, err
	}
	if v > 1<<40 {
		return 0, &ProtocolError{query, fmt.Sprintf("a key count of %d", int64(v))}
	}
	return int64(v), nil
}

// readCheck reads CHECK's reply.
func readCheck(r *bufio.Reader) (bool, error) {
	b, err := readByte(r)
	if err != nil {
		return false, err
	}
	switch b {
	case checkReady:
		return true, nil
	case checkNotReady:
		return false, nil
	}
	return false, &ProtocolError{"check", fmt.Sprintf("byte %d (READY 0 or NOT_READY 1 expected)", b)}
}

// readWait reads WAIT's reply, or one of the replies that may follow
// CANCEL_WAIT: STOP_WAITING (0) or WAIT_CANCELED (1).
func readWait(r *bufio.Reader) (byte, error) {
	b, err := readByte(r)
	if err != nil {
		return 0, err
	}
	if b != waitStopWaiting && b != waitCanceled {
		return 0, &ProtocolError{"wait", fmt.Sprintf("byte %d (STOP_WAITING 0 or WAIT_CANCELED 1 expected)", b)}
	}
	return b, nil
}

func readU64(r *bufio.Reader) (uint64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, shortReply(err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func readU32(r *bufio.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, shortReply(err)
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func readByte(r *bufio.Reader) (byte, error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, shortReply(err)
	}
	return b, nil
}

// errClosedByServer is a reply cut short by the server closing the connection.
var errClosedByServer = errors.New("the server closed the connection")

func shortReply(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errClosedByServer
	}
	return err
}

// quote bounds and quotes a value for an error message.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
