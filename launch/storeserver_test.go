package launch

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// testServer speaks the server side of PyTorch's TCPStore protocol, written
// from PyTorch's C++ sources (torch/csrc/distributed/c10d/):
//
//   - current (default): TCPStoreLibUvBackend.cpp, the server of PyTorch 2.4
//     and later (the one torchrun's agent runs): UvClient::processBuf and its
//     parse_*_command, LibUVStoreDaemon::set/get/add/checkKeys/waitKeys/
//     wakeupWaitingClients/clearClientWaitState/deleteKey; the query types of
//     TCPStoreBackend.hpp (VALIDATE = 0 ... PING = 13). A client's first query
//     must be VALIDATE with validationMagicNumber, else nothing is answered
//     (processBuf returns without reading further); a key over MAX_STRING_LEN
//     (8 KiB), a payload over MAX_PAYLOAD_LEN (8 MiB), more than MAX_KEY_COUNT
//     (128 Ki) keys, an unknown query or ADD on a value std::stoll cannot read
//     close the connection; GET of a missing key answers an empty value
//     (missing_key); WAIT answers STOP_WAITING at once when every key is set,
//     else once the keys that were missing (counted with repeats) have all been
//     set; CANCEL_WAIT forgets the client's wait and answers WAIT_CANCELED.
//   - legacy: PyTorch 1.13's TCPStore.cpp (TCPStoreMasterDaemon::query and its
//     handlers), checked against Debian's python3-torch 1.13.1: no VALIDATE,
//     query types SET = 0 ... GETNUMKEYS = 6, WATCH_KEY = 7, DELETE_KEY = 8;
//     no CANCEL_WAIT or PING (an unknown query closes the connection); GET of a
//     missing key closes it (tcpStore_.at throws); a string length that
//     std::vector cannot hold closes it.
type testServer struct {
	t      testing.TB
	ln     net.Listener
	legacy bool

	mu      sync.Mutex
	kv      map[string][]byte
	waiting map[string][]*srvConn // key → clients waiting for it (with repeats)
	awaited map[*srvConn]int      // client → keys it still waits for
	conns   map[net.Conn]bool
	queries map[byte]int // queries seen, by byte
	wg      sync.WaitGroup
}

type srvConn struct {
	c  net.Conn
	wm sync.Mutex
}

func (c *srvConn) write(b []byte) {
	c.wm.Lock()
	defer c.wm.Unlock()
	c.c.Write(b)
}

func startTestServer(t testing.TB, legacy bool) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, ln: ln, legacy: legacy, kv: map[string][]byte{}, waiting: map[string][]*srvConn{},
		awaited: map[*srvConn]int{}, conns: map[net.Conn]bool{}, queries: map[byte]int{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) addr() string { return s.ln.Addr().String() }

func (s *testServer) stop() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// value returns what the server holds under a wire key (with PyTorch's "/").
func (s *testServer) value(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[key]
	return v, ok
}

// waiters returns how many clients wait for keys.
func (s *testServer) waiters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.awaited)
}

func (s *testServer) count(q byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[q]
}

// Server-side query types, by generation.
func (s *testServer) is(b, q byte) bool {
	if s.legacy {
		switch q {
		case qValidate, qCancelWait, qPing:
			return false
		case qDeleteKey: // after WATCH_KEY = 7
			return b == 8
		}
		return b == q-1
	}
	return b == q
}

func (s *testServer) serve(c net.Conn) {
	sc := &srvConn{c: c}
	r := bufio.NewReader(c)
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.clearWait(sc)
		s.mu.Unlock()
	}()
	validated := s.legacy
	for {
		q, err := r.ReadByte()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.queries[q]++
		s.mu.Unlock()
		if !validated { // libuv: a miscellaneous client gets no answer
			m, err := u32(r)
			if err != nil || q != qValidate || m != validationMagic {
				io.Copy(io.Discard, r)
				return
			}
			validated = true
			continue
		}
		if !s.query(sc, r, q) {
			return // the server closes the connection
		}
	}
}

// query handles one query; false closes the connection.
func (s *testServer) query(c *srvConn, r *bufio.Reader, q byte) bool {
	switch {
	case s.is(q, qPing):
		n, err := u32(r)
		if err != nil {
			return false
		}
		c.write(binary.LittleEndian.AppendUint32(nil, n))
	case s.is(q, qSet):
		k, ok := s.str(r, maxKey)
		if !ok {
			return false
		}
		v, ok := s.str(r, 8<<20)
		if !ok {
			return false
		}
		s.mu.Lock()
		s.kv[k] = []byte(v)
		s.wake(k)
		s.mu.Unlock()
	case s.is(q, qGet):
		k, ok := s.str(r, maxKey)
		if !ok {
			return false
		}
		s.mu.Lock()
		v, found := s.kv[k]
		s.mu.Unlock()
		if !found && s.legacy {
			return false
		}
		c.write(binary.LittleEndian.AppendUint64(nil, uint64(len(v))))
		c.write(v)
	case s.is(q, qAdd):
		k, ok := s.str(r, maxKey)
		if !ok {
			return false
		}
		d, err := u64(r)
		if err != nil {
			return false
		}
		s.mu.Lock()
		sum := int64(d)
		if old, found := s.kv[k]; found {
			n, ok := stoll(string(old))
			if !ok {
				s.mu.Unlock()
				return false
			}
			sum += n
		}
		s.kv[k] = []byte(strconv.FormatInt(sum, 10))
		s.wake(k)
		s.mu.Unlock()
		c.write(binary.LittleEndian.AppendUint64(nil, uint64(sum)))
	case s.is(q, qCheck), s.is(q, qWait):
		keys, ok := s.keys(r)
		if !ok {
			return false
		}
		s.mu.Lock()
		all := true
		for _, k := range keys {
			if _, found := s.kv[k]; !found {
				all = false
			}
		}
		if s.is(q, qCheck) {
			s.mu.Unlock()
			if all {
				c.write([]byte{checkReady})
			} else {
				c.write([]byte{checkNotReady})
			}
			return true
		}
		if all {
			s.mu.Unlock()
			c.write([]byte{waitStopWaiting})
			return true
		}
		n := 0
		for _, k := range keys {
			if _, found := s.kv[k]; !found {
				s.waiting[k] = append(s.waiting[k], c)
				n++
			}
		}
		s.awaited[c] = n
		s.mu.Unlock()
	case s.is(q, qGetNumKeys):
		s.mu.Lock()
		n := len(s.kv)
		s.mu.Unlock()
		c.write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
	case s.is(q, qDeleteKey):
		k, ok := s.str(r, maxKey)
		if !ok {
			return false
		}
		s.mu.Lock()
		_, found := s.kv[k]
		delete(s.kv, k)
		s.mu.Unlock()
		n := uint64(0)
		if found {
			n = 1
		}
		c.write(binary.LittleEndian.AppendUint64(nil, n))
	case s.is(q, qCancelWait):
		s.mu.Lock()
		s.clearWait(c)
		s.mu.Unlock()
		c.write([]byte{waitCanceled})
	default:
		return false
	}
	return true
}

// wake answers the clients whose last awaited key is k (s.mu held).
func (s *testServer) wake(k string) {
	for _, c := range s.waiting[k] {
		if s.awaited[c]--; s.awaited[c] == 0 {
			delete(s.awaited, c)
			c.write([]byte{waitStopWaiting})
		}
	}
	delete(s.waiting, k)
}

// clearWait forgets c's wait (s.mu held).
func (s *testServer) clearWait(c *srvConn) {
	if _, ok := s.awaited[c]; !ok {
		return
	}
	delete(s.awaited, c)
	for k, cs := range s.waiting {
		var keep []*srvConn
		for _, x := range cs {
			if x != c {
				keep = append(keep, x)
			}
		}
		if len(keep) == 0 {
			delete(s.waiting, k)
		} else {
			s.waiting[k] = keep
		}
	}
}

// str reads a length-prefixed string of at most max bytes (libuv) or of any
// length std::vector can hold (legacy).
func (s *testServer) str(r *bufio.Reader, max uint64) (string, bool) {
	n, err := u64(r)
	if err != nil {
		return "", false
	}
	if (!s.legacy && n > max) || n >= 1<<63 {
		return "", false
	}
	if n > 1<<30 { // a test never sends this much: treat as the allocation failing
		return "", false
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", false
	}
	return string(b), true
}

func (s *testServer) keys(r *bufio.Reader) ([]string, bool) {
	n, err := u64(r)
	if err != nil || n > 128*1024 {
		return nil, false
	}
	keys := make([]string, n)
	for i := range keys {
		var ok bool
		if keys[i], ok = s.str(r, maxKey); !ok {
			return nil, false
		}
	}
	return keys, true
}

func u32(r io.Reader) (uint32, error) {
	var b [4]byte
	_, err := io.ReadFull(r, b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func u64(r io.Reader) (uint64, error) {
	var b [8]byte
	_, err := io.ReadFull(r, b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

// stoll reads a number as std::stoll does: leading white space, a sign,
// digits, and whatever after; no digits is an error.
func stoll(s string) (int64, bool) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	j := i
	if j < len(s) && (s[j] == '-' || s[j] == '+') {
		j++
	}
	k := j
	for k < len(s) && s[k] >= '0' && s[k] <= '9' {
		k++
	}
	if k == j {
		return 0, false
	}
	v, err := strconv.ParseInt(s[i:k], 10, 64)
	return v, err == nil
}
