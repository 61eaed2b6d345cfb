package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Store is a client of PyTorch's c10d TCPStore: the key-value store that
// torchrun's agent runs at MASTER_ADDR:MASTER_PORT for its workers, and that
// torch.distributed.TCPStore serves from Python. A Go program joins a PyTorch
// job's store with it, and UniqueID shares NCCL's unique id through it.
//
// Keys are spelled as in Python: Go's Get(ctx, "k") reads what Python's
// store.set("k", ...) wrote (both put PyTorch's "/" before the key on the
// wire). Values are bytes.
//
// Every call takes a context and returns by its end: a reply that does not come
// ends the call with an error wrapping ctx.Err(). One call runs at a time; the
// others queue (also under their contexts). After an error the connection is
// closed and later calls fail, except a Wait or Get that its context ended
// while it waited for a key: the store then withdraws the wait from the server
// (CANCEL_WAIT) and stays usable. A reply that PyTorch's server would not send
// is an error matching ErrProtocol. Store is safe for concurrent use, but
// calls share one connection: a Get or Wait waiting for a key holds it, and a
// Set from another goroutine waits behind it (as with PyTorch's own client).
// Give a writer that must not wait its own DialStore.
type Store struct {
	addr  string
	proto protocol
	conn  net.Conn
	r     *bufio.Reader
	sem   chan struct{} // one call on the connection at a time

	mu      sync.Mutex
	broken  error // why the connection cannot be used any more
	closed  bool
	waiting bool // a WAIT was sent whose reply has not been read
}

// StoreError is an error of a call on a Store: which call, on which store, for
// which keys, and why (Err: a context's error, a *ProtocolError, ErrStoreClosed,
// the network's error).
type StoreError struct {
	Addr string   // the store's host:port
	Op   string   // "dial", "set", "get", "wait", "add" or "check"
	Keys []string // the keys of the call, as the caller gave them
	Err  error
}

func (e *StoreError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "launch: store %s: %s", e.Addr, e.Op)
	for i, k := range e.Keys {
		if i == 3 {
			fmt.Fprintf(&b, " and %d more", len(e.Keys)-3)
			break
		}
		b.WriteString(" " + quote(k))
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

func (e *StoreError) Unwrap() error { return e.Err }

// ErrStoreClosed is the error of a call on a Store after Close.
var ErrStoreClosed = errors.New("store closed")

// repairGrace bounds the withdrawal of a wait whose context ended: CANCEL_WAIT
// and its reply. It runs after the call has returned.
const repairGrace = 5 * time.Second

// DialStore connects to the TCPStore at addr (host:port), retrying while
// nothing listens there yet, as PyTorch's own client does, until ctx ends. It
// then checks that a TCPStore answers, and which generation of the protocol it
// speaks: PyTorch 2.x and later (VALIDATE first), or older servers such as
// PyTorch 1.13's.
func DialStore(ctx context.Context, addr string) (*Store, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, &StoreError{Addr: addr, Op: "dial", Err: err}
	}
	s := &Store{addr: addr, sem: make(chan struct{}, 1)}
	proto, err := s.connect(ctx)
	if err != nil {
		return nil, &StoreError{Addr: addr, Op: "dial", Err: err}
	}
	s.proto = proto
	return s, nil
}

// Addr returns the store's host:port.
func (s *Store) Addr() string { return s.addr }

// Legacy reports whether the server speaks the protocol of PyTorch releases
// before VALIDATE (PyTorch 1.13's, for one).
func (s *Store) Legacy() bool { return s.proto == protoLegacy }

// Set stores value under key, replacing any value, and wakes the calls
// waiting for key. PyTorch's server does not answer a SET: an error says only
// that the request could not be sent.
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return &StoreError{Addr: s.addr, Op: "set", Keys: []string{key}, Err: err}
	}
	if len(value) > 8<<20 {
		return &StoreError{Addr: s.addr, Op: "set", Keys: []string{key},
			Err: fmt.Errorf("a value of %d bytes: PyTorch's server refuses more than 8 MiB", len(value))}
	}
	return s.do(ctx, "set", []string{key}, func() error {
		return s.send(newRequest(s.proto, qSet).key(key).bytes(value))
	})
}

// Get returns the value of key, waiting until some client sets it, as
// PyTorch's store.get does (WAIT, then GET).
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, &StoreError{Addr: s.addr, Op: "get", Keys: []string{key}, Err: err}
	}
	var v []byte
	err := s.do(ctx, "get", []string{key}, func() error {
		if err := s.wait([]string{key}); err != nil {
			return err
		}
		if err := s.send(newRequest(s.proto, qGet).key(key)); err != nil {
			return err
		}
		var err error
		v, err = readValue(s.r, "get")
		return err
	})
	return v, err
}

// Wait returns once every key has been set (by Set or Add). With no keys it
// returns at once, asking the server nothing.
func (s *Store) Wait(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return &StoreError{Addr: s.addr, Op: "wait", Keys: keys, Err: err}
		}
	}
	return s.do(ctx, "wait", keys, func() error { return s.wait(keys) })
}

// Add adds delta to the number stored under key (0 if unset: the value is
// the number's decimal text, as PyTorch's add keeps it) and returns the sum.
// The server closes the connection when key holds something else than a
// number.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, &StoreError{Addr: s.addr, Op: "add", Keys: []string{key}, Err: err}
	}
	var sum int64
	err := s.do(ctx, "add", []string{key}, func() error {
		if err := s.send(newRequest(s.proto, qAdd).key(key).u64(uint64(delta))); err != nil {
			return err
		}
		v, err := readU64(s.r)
		sum = int64(v)
		return err
	})
	return sum, err
}

// Check reports whether every key is set, without waiting. With no keys it
// returns true, asking the server nothing.
func (s *Store) Check(ctx context.Context, keys ...string) (bool, error) {
	if len(keys) == 0 {
		return true, nil
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return false, &StoreError{Addr: s.addr, Op: "check", Keys: keys, Err: err}
		}
	}
	var ok bool
	err := s.do(ctx, "check", keys, func() error {
		if err := s.send(newRequest(s.proto, qCheck).keys(keys)); err != nil {
			return err
		}
		var err error
		ok, err = readCheck(s.r)
		return err
	})
	return ok, err
}

// Close closes the connection; calls under way end with ErrStoreClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.broken != nil { // already closed
		return nil
	}
	return s.conn.Close()
}

func checkKey(k string) error {
	if len(keyPrefix)+len(k) > maxKey {
		return fmt.Errorf("a key of %d bytes: PyTorch's server refuses keys over %d bytes", len(k), maxKey-len(keyPrefix))
	}
	return nil
}

// wait sends WAIT for keys and reads its reply.
func (s *Store) wait(keys []string) error {
	if err := s.send(newRequest(s.proto, qWait).keys(keys)); err != nil {
		return err
	}
	s.setWaiting(true)
	b, err := readWait(s.r)
	if err != nil {
		return err
	}
	s.setWaiting(false)
	if b != waitStopWaiting {
		return &ProtocolError{"wait", "WAIT_CANCELED, but no wait was withdrawn"}
	}
	return nil
}

func (s *Store) setWaiting(w bool) {
	s.mu.Lock()
	s.waiting = w
	s.mu.Unlock()
}

func (s *Store) send(r *request) error {
	_, err := s.conn.Write(r.b)
	return err
}

// long ago is a deadline in the past: it interrupts a read or write at once.
var longAgo = time.Unix(1, 0)

// do runs fn, one call at a time, with the connection's deadline following
// ctx: its deadline, and its cancellation.
func (s *Store) do(ctx context.Context, op string, keys []string, fn func() error) error {
	fail := func(err error) error { return &StoreError{Addr: s.addr, Op: op, Keys: keys, Err: err} }
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	release := true
	defer func() {
		if release {
			<-s.sem
		}
	}()
	if err := s.usable(); err != nil {
		return fail(err)
	}
	dl, _ := ctx.Deadline()
	s.conn.SetDeadline(dl)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		s.conn.SetDeadline(longAgo)
		close(fired)
	})
	err := fn()
	if !stop() {
		<-fired
	}
	if err == nil {
		return nil
	}
	err = s.cause(ctx, err)
	s.mu.Lock()
	ended := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	recoverable := s.waiting && s.proto == protoCurrent && ended && !s.closed
	s.mu.Unlock()
	if recoverable { // the request was sent whole; withdraw it, keep the connection
		release = false
		go s.cancelWait()
		return fail(err)
	}
	s.breakConn(err)
	return fail(err)
}

// cancelWait withdraws the WAIT a call left on the server when its context
// ended (CANCEL_WAIT, as PyTorch's client does after its timeout), then
// releases the connection; on any failure it closes it.
func (s *Store) cancelWait() {
	defer func() { <-s.sem }()
	s.conn.SetDeadline(time.Now().Add(repairGrace))
	if err := s.send(newRequest(s.proto, qCancelWait)); err != nil {
		s.breakConn(err)
		return
	}
	for { // STOP_WAITING may come first, if the key was set meanwhile
		b, err := readWait(s.r)
		if err != nil {
			s.breakConn(fmt.Errorf("withdrawing an interrupted wait: %w", err))
			return
		}
		if b == waitCanceled {
			s.setWaiting(false)
			s.conn.SetDeadline(time.Time{})
			return
		}
	}
}

// usable returns why the connection cannot take a call, or nil.
func (s *Store) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrStoreClosed
	}
	if s.broken != nil {
		return fmt.Errorf("connection closed after an earlier error: %w", s.broken)
	}
	return nil
}

// breakConn closes the connection after err; later calls report it.
func (s *Store) breakConn(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil && !s.closed {
		s.broken = err
		s.conn.Close()
	}
}

// cause says why a call failed: the context's end rather than the deadline
// it set on the connection, ErrStoreClosed rather than a closed socket.
func (s *Store) cause(ctx context.Context, err error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return ErrStoreClosed
	case ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded):
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded): // ctx's deadline, a moment before ctx says so
		return context.DeadlineExceeded
	}
	return err
}

// connect dials until the server accepts or ctx ends, and shakes hands.
func (s *Store) connect(ctx context.Context) (protocol, error) {
	conn, r, err := s.dial(ctx)
	if err != nil {
		return 0, err
	}
	proto, err := s.handshake(ctx, conn, r)
	if err == errLegacy || err == errNoPing {
		conn.Close()
		if conn, r, err = s.dial(ctx); err != nil {
			return 0, err
		}
		p := protoLegacy
		if err == errNoPing {
			p = protoCurrent
		}
		proto, err = p, s.confirm(ctx, conn, r, p)
	}
	if err != nil {
		conn.Close()
		return 0, err
	}
	s.conn, s.r = conn, r
	return proto, nil
}

// dial connects, retrying with backoff while the address refuses or cannot be
// reached, as PyTorch's TCPStore client retries until its timeout.
func (s *Store) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	backoff := 20 * time.Millisecond
	for tries := 1; ; tries++ {
		conn, err := d.DialContext(ctx, "tcp", s.addr)
		if err == nil {
			return conn, bufio.NewReader(conn), nil
		}
		var dns *net.DNSError
		if errors.As(err, &dns) && dns.IsNotFound {
			return nil, nil, err
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w (%d tries; the last: %v)", ctx.Err(), tries, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("%w (%d tries; the last: %v)", ctx.Err(), tries, err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

var (
	errLegacy = errors.New("legacy server") // closed at VALIDATE: a server without it
	errNoPing = errors.New("no PING")       // answered VALIDATE, closed at PING
)

// handshake sends, in one write, what tells the two generations of servers
// apart:
//
//	VALIDATE 0x3C85F7CE, GETNUMKEYS, PING nonce   (current query types)
//
// A current server validates, answers the key count (int64), then echoes the
// nonce (uint32): PyTorch's own client sends VALIDATE and PING the same way. A
// legacy server reads the 0 as SET and the next 8 bytes as the key's length;
// the nonce's second byte is at least 0x80, so that length is 2^63 or more and
// the server drops the connection at once (std::vector's length_error) without
// storing anything. A current server without PING answers the count, then
// drops it.
func (s *Store) handshake(ctx context.Context, conn net.Conn, r *bufio.Reader) (protocol, error) {
	nonce := rand.Uint32() | 0x8000
	req := newRequest(protoCurrent, qValidate).u32(validationMagic)
	req.b = append(req.b, qGetNumKeys, qPing)
	req.u32(nonce)
	err := s.exchange(ctx, conn, func() error {
		if _, err := conn.Write(req.b); err != nil {
			return err
		}
		if _, err := r.Peek(1); err != nil {
			if closedByPeer(err) {
				return errLegacy
			}
			return err
		}
		if _, err := readCount(r, "handshake"); err != nil {
			return err
		}
		got, err := readU32(r)
		if err != nil {
			if errors.Is(err, errClosedByServer) {
				return errNoPing
			}
			return err
		}
		if got != nonce {
			return &ProtocolError{"handshake", fmt.Sprintf("PING echoed %#x, not the nonce %#x", got, nonce)}
		}
		return nil
	})
	return protoCurrent, err
}

// confirm checks on a new connection that the server answers a plain
// GETNUMKEYS in protocol p (after VALIDATE on current servers).
func (s *Store) confirm(ctx context.Context, conn net.Conn, r *bufio.Reader, p protocol) error {
	var req []byte
	if p == protoCurrent {
		req = newRequest(p, qValidate).u32(validationMagic).b
	}
	req = append(req, p.code(qGetNumKeys))
	return s.exchange(ctx, conn, func() error {
		if _, err := conn.Write(req); err != nil {
			return err
		}
		_, err := readCount(r, "handshake")
		if errors.Is(err, errClosedByServer) || closedByPeer(err) {
			return fmt.Errorf("%w to the handshakes of PyTorch 2.x and of PyTorch 1.13: not a TCPStore?", errClosedByServer)
		}
		return err
	})
}

// exchange runs fn with conn's deadline following ctx.
func (s *Store) exchange(ctx context.Context, conn net.Conn, fn func() error) error {
	dl, _ := ctx.Deadline()
	conn.SetDeadline(dl)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.SetDeadline(longAgo)
		close(fired)
	})
	err := fn()
	if !stop() {
		<-fired
	}
	conn.SetDeadline(time.Time{})
	if err != nil && err != errLegacy && err != errNoPing {
		if ctx.Err() != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("no answer to the handshake: %w", ctx.Err())
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("no answer to the handshake: %w", context.DeadlineExceeded)
		}
	}
	return err
}

// closedByPeer reports whether err is the peer closing or resetting the
// connection.
func closedByPeer(err error) bool {
	return errors.Is(err, errClosedByServer) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}
