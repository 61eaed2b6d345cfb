package launch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// slack is how long after its deadline a call may return.
const slack = 100 * time.Millisecond

// timed runs fn under a context with deadline d and checks that it returned
// an error wrapping context.DeadlineExceeded within d + slack.
func timed(t *testing.T, d time.Duration, fn func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	if took := time.Since(start); took > d+slack {
		t.Errorf("returned after %v, deadline %v", took, d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v, want an error wrapping context.DeadlineExceeded", err)
	}
	return err
}

func dial(t *testing.T, addr string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := DialStore(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noLeak checks that the goroutines of a test are gone once it ends.
func noLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		for range 100 {
			if runtime.NumGoroutine() <= before {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	})
}

// TestStoreOps: every call against both generations of the server, with the
// keys as PyTorch puts them on the wire ("/" first).
func TestStoreOps(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			noLeak(t)
			srv := startTestServer(t, legacy)
			s := dial(t, srv.addr())
			ctx := bg(t)
			if s.Legacy() != legacy {
				t.Fatalf("Legacy() = %v", s.Legacy())
			}
			if err := s.Set(ctx, "a", []byte("x\x00y")); err != nil {
				t.Fatal(err)
			}
			s.Check(ctx, "a") // SET has no reply: a round trip before looking at the server
			if v, ok := srv.value("/a"); !ok || string(v) != "x\x00y" {
				t.Errorf("server holds %q, %v under /a", v, ok)
			}
			if v, err := s.Get(ctx, "a"); err != nil || string(v) != "x\x00y" {
				t.Errorf("Get: %q, %v", v, err)
			}
			if err := s.Set(ctx, "empty", nil); err != nil {
				t.Fatal(err)
			}
			if v, err := s.Get(ctx, "empty"); err != nil || len(v) != 0 {
				t.Errorf("Get empty: %q, %v", v, err)
			}
			for i, want := range []int64{5, 3, -7} {
				got, err := s.Add(ctx, "n", []int64{5, -2, -10}[i])
				if err != nil || got != want {
					t.Errorf("Add %d: %d, %v; want %d", i, got, err, want)
				}
			}
			s.Check(ctx, "n")
			if v, _ := srv.value("/n"); string(v) != "-7" {
				t.Errorf("Add left %q, want the decimal text -7", v)
			}
			if ok, err := s.Check(ctx, "a", "n"); !ok || err != nil {
				t.Errorf("Check(a, n): %v, %v", ok, err)
			}
			if ok, err := s.Check(ctx, "a", "missing"); ok || err != nil {
				t.Errorf("Check(a, missing): %v, %v", ok, err)
			}
			if err := s.Wait(ctx, "a", "n"); err != nil {
				t.Error(err)
			}
			if err := s.Wait(ctx); err != nil {
				t.Errorf("Wait(): %v", err)
			}
			if ok, err := s.Check(ctx); !ok || err != nil {
				t.Errorf("Check(): %v, %v", ok, err)
			}
			big := bytes.Repeat([]byte{0xAB}, 1<<20)
			if err := s.Set(ctx, "big", big); err != nil {
				t.Fatal(err)
			}
			if v, err := s.Get(ctx, "big"); err != nil || !bytes.Equal(v, big) {
				t.Errorf("Get big: %d bytes, %v", len(v), err)
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrStoreClosed) {
				t.Errorf("Get after Close: %v", err)
			}
		})
	}
}

// TestStoreHandshake: a client's first query is VALIDATE (the libuv server
// answers nothing else), then PING with a nonce echoed; the legacy server
// gets its own handshake and nothing is stored by the probe it dropped.
func TestStoreHandshake(t *testing.T) {
	srv := startTestServer(t, false)
	dial(t, srv.addr())
	if srv.count(qValidate) != 1 || srv.count(qPing) != 1 || srv.count(qGetNumKeys) != 1 {
		t.Errorf("queries: %v", srv.queries)
	}
	// A client that skips VALIDATE gets no answer from a current server.
	c, err := net.Dial("tcp", srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{qGetNumKeys})
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 8)); n != 0 || !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
		t.Errorf("an unvalidated query was answered: %d bytes, %v", n, err)
	}

	old := startTestServer(t, true)
	dial(t, old.addr())
	old.mu.Lock()
	n := len(old.kv)
	old.mu.Unlock()
	if n != 0 {
		t.Errorf("the legacy server stored %d keys during the handshake", n)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestStoreGetWaits: Get waits for a key another client sets later; Wait on
// several keys returns when the last is set.
func TestStoreGetWaits(t *testing.T) {
	noLeak(t)
	srv := startTestServer(t, false)
	a, b := dial(t, srv.addr()), dial(t, srv.addr())
	ctx := bg(t)
	got := make(chan string, 1)
	go func() {
		v, err := a.Get(ctx, "late")
		got <- fmt.Sprintf("%s %v", v, err)
	}()
	waited := make(chan error, 1)
	c := dial(t, srv.addr())
	go func() { waited <- c.Wait(ctx, "late", "later", "late") }()
	time.Sleep(50 * time.Millisecond)
	select {
	case r := <-got:
		t.Fatalf("Get returned before the key was set: %s", r)
	default:
	}
	if err := b.Set(ctx, "late", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != "v <nil>" {
		t.Errorf("Get: %s", r)
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned with a key missing: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := b.Add(ctx, "later", 1); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Error(err)
	}
}

// TestStoreWaitDeadline: a wait whose context ends returns by the deadline;
// on a current server the wait is withdrawn (CANCEL_WAIT) and the store stays
// usable; on a legacy server (no CANCEL_WAIT) the store says it is unusable.
func TestStoreWaitDeadline(t *testing.T) {
	noLeak(t)
	srv := startTestServer(t, false)
	s := dial(t, srv.addr())
	timed(t, 200*time.Millisecond, func(ctx context.Context) error { return s.Wait(ctx, "never") })
	timed(t, 100*time.Millisecond, func(ctx context.Context) error { _, err := s.Get(ctx, "never"); return err })
	ctx := bg(t)
	if err := s.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("after withdrawn waits: %q, %v", v, err)
	}
	if srv.count(qCancelWait) != 2 || srv.waiters() != 0 {
		t.Errorf("CANCEL_WAIT sent %d times, %d waiters left", srv.count(qCancelWait), srv.waiters())
	}
	// A cancel (not a deadline) is reported as such.
	cctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := s.Wait(cctx, "never"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}

	old := startTestServer(t, true)
	ls := dial(t, old.addr())
	timed(t, 100*time.Millisecond, func(ctx context.Context) error { return ls.Wait(ctx, "never") })
	if err := ls.Set(ctx, "k", nil); err == nil || !strings.Contains(err.Error(), "earlier error") {
		t.Errorf("legacy store after an interrupted wait: %v", err)
	}
}

// TestStoreQueue: calls on one Store from many goroutines queue; a call
// waiting in the queue ends with its own context.
func TestStoreQueue(t *testing.T) {
	noLeak(t)
	srv := startTestServer(t, false)
	s := dial(t, srv.addr())
	ctx := bg(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Add(ctx, "sum", int64(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if v, _ := srv.value("/sum"); string(v) != "190" {
		t.Errorf("sum %q, want 190", v)
	}
	blocked := make(chan error, 1)
	go func() { blocked <- s.Wait(ctx, "gate") }()
	time.Sleep(20 * time.Millisecond)
	timed(t, 100*time.Millisecond, func(ctx context.Context) error { _, err := s.Check(ctx, "gate"); return err })
	b := dial(t, srv.addr())
	b.Set(ctx, "gate", nil)
	if err := <-blocked; err != nil {
		t.Error(err)
	}
}

// TestStoreUnreachable: nothing listens: DialStore retries until its deadline
// and says how often it tried.
func TestStoreUnreachable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	err := timed(t, 300*time.Millisecond, func(ctx context.Context) error { _, err := DialStore(ctx, addr); return err })
	var se *StoreError
	if !errors.As(err, &se) || se.Op != "dial" || se.Addr != addr || !strings.Contains(err.Error(), "tries") {
		t.Errorf("%v", err)
	}
	if _, err := DialStore(context.Background(), "no-port"); err == nil {
		t.Error("an address without a port was taken")
	}
}

// TestStoreLateServer: DialStore waits for a server that starts listening
// after it began, as torchrun's workers may start before their store.
func TestStoreLateServer(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	go func() {
		time.Sleep(150 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		srv := &testServer{t: t, ln: l, kv: map[string][]byte{}, waiting: map[string][]*srvConn{},
			awaited: map[*srvConn]int{}, conns: map[net.Conn]bool{}, queries: map[byte]int{}}
		t.Cleanup(srv.stop)
		c, err := l.Accept()
		if err == nil {
			srv.serve(c)
		}
	}()
	s := dial(t, addr)
	if ok, err := s.Check(bg(t), "x"); ok || err != nil {
		t.Errorf("%v, %v", ok, err)
	}
}

// rawServer accepts connections and gives each to handle.
func rawServer(t *testing.T, handle func(c net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// handshaken answers the current handshake properly, then hands on.
func handshaken(after func(c net.Conn, r *bufio.Reader)) func(c net.Conn) {
	return func(c net.Conn) {
		r := bufio.NewReader(c)
		var b [11]byte // VALIDATE magic, GETNUMKEYS, PING
		if _, err := io.ReadFull(r, b[:7]); err != nil {
			return
		}
		n, _ := u32(r)
		c.Write(binary.LittleEndian.AppendUint64(nil, 0))
		c.Write(binary.LittleEndian.AppendUint32(nil, n))
		after(c, r)
	}
}

// TestStoreSilent: a server that accepts and never answers: the handshake,
// and a call after a good handshake, end at the deadline.
func TestStoreSilent(t *testing.T) {
	noLeak(t)
	addr := rawServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	err := timed(t, 200*time.Millisecond, func(ctx context.Context) error { _, err := DialStore(ctx, addr); return err })
	if !strings.Contains(err.Error(), "no answer to the handshake") {
		t.Errorf("%v", err)
	}
	addr = rawServer(t, handshaken(func(c net.Conn, r *bufio.Reader) { io.Copy(io.Discard, r) }))
	s := dial(t, addr)
	timed(t, 150*time.Millisecond, func(ctx context.Context) error { _, err := s.Check(ctx, "k"); return err })
	timed(t, 150*time.Millisecond, func(ctx context.Context) error { _, err := s.Add(ctx, "k", 1); return err })
}

// TestStoreGarbage: replies no TCPStore sends are *ProtocolError (matching
// ErrProtocol), at once; the store is closed after them.
func TestStoreGarbage(t *testing.T) {
	noLeak(t)
	http := rawServer(t, func(c net.Conn) {
		c.Read(make([]byte, 64))
		c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
	})
	ctx := bg(t)
	_, err := DialStore(ctx, http)
	var pe *ProtocolError
	if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) {
		t.Errorf("an HTTP server: %v", err)
	}
	wrongNonce := rawServer(t, func(c net.Conn) {
		c.Read(make([]byte, 64))
		c.Write(make([]byte, 12))
	})
	if _, err := DialStore(ctx, wrongNonce); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "nonce") {
		t.Errorf("a wrong nonce: %v", err)
	}
	for _, c := range []struct {
		name  string
		reply []byte
		call  func(s *Store) error
	}{
		{"check byte 7", []byte{7}, func(s *Store) error { _, err := s.Check(ctx, "k"); return err }},
		{"wait byte 9", []byte{9}, func(s *Store) error { return s.Wait(ctx, "k") }},
		{"wait cancelled unasked", []byte{waitCanceled}, func(s *Store) error { return s.Wait(ctx, "k") }},
		{"get 2^62 bytes", append([]byte{waitStopWaiting}, binary.LittleEndian.AppendUint64(nil, 1<<62)...),
			func(s *Store) error { _, err := s.Get(ctx, "k"); return err }},
	} {
		addr := rawServer(t, handshaken(func(conn net.Conn, r *bufio.Reader) {
			conn.Write(c.reply)
			io.Copy(io.Discard, r)
		}))
		s := dial(t, addr)
		start := time.Now()
		err := c.call(s)
		if !errors.Is(err, ErrProtocol) || time.Since(start) > slack {
			t.Errorf("%s: %v after %v", c.name, err, time.Since(start))
		}
		if _, err := s.Check(ctx, "k"); err == nil || !strings.Contains(err.Error(), "earlier error") {
			t.Errorf("%s: the store took a call after garbage: %v", c.name, err)
		}
	}
}

// TestStoreServerCloses: a server that closes mid-reply, or at once (not a
// store of either generation).
func TestStoreServerCloses(t *testing.T) {
	addr := rawServer(t, handshaken(func(c net.Conn, r *bufio.Reader) {
		r.ReadByte()
		c.Write([]byte{1, 2, 3})
	}))
	s := dial(t, addr)
	if _, err := s.Add(bg(t), "k", 1); !errors.Is(err, errClosedByServer) {
		t.Errorf("%v", err)
	}
	closer := rawServer(t, func(c net.Conn) {})
	if _, err := DialStore(bg(t), closer); err == nil || !strings.Contains(err.Error(), "not a TCPStore") {
		t.Errorf("%v", err)
	}
}

// TestStoreCloseUnblocks: Close ends a call waiting for a key.
func TestStoreCloseUnblocks(t *testing.T) {
	noLeak(t)
	srv := startTestServer(t, false)
	s := dial(t, srv.addr())
	done := make(chan error, 1)
	go func() { _, err := s.Get(context.Background(), "never"); done <- err }()
	time.Sleep(30 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStoreClosed) {
			t.Errorf("%v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close did not end the wait")
	}
}

// TestStoreLimits: keys and values PyTorch's server would refuse (closing the
// connection) are refused before anything is sent.
func TestStoreLimits(t *testing.T) {
	srv := startTestServer(t, false)
	s := dial(t, srv.addr())
	ctx := bg(t)
	long := strings.Repeat("k", maxKey)
	if err := s.Set(ctx, long, nil); err == nil || !strings.Contains(err.Error(), "8192") {
		t.Errorf("long key: %v", err)
	}
	if err := s.Set(ctx, "k", make([]byte, 8<<20+1)); err == nil {
		t.Error("a value over 8 MiB was sent")
	}
	if _, err := s.Check(ctx, "k"); err != nil {
		t.Errorf("the store is not usable after refused calls: %v", err)
	}
	// The server closes the connection on ADD to a value that is no number.
	s.Set(ctx, "text", []byte("abc"))
	if _, err := s.Add(ctx, "text", 1); !errors.Is(err, errClosedByServer) {
		t.Errorf("Add to text: %v", err)
	}
}

// FuzzStoreReply: the reply decoders take any bytes without panicking,
// allocating beyond the bytes they got, or accepting what no server sends.
func FuzzStoreReply(f *testing.F) {
	f.Add([]byte{0})
	f.Add(binary.LittleEndian.AppendUint64(nil, 3))
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 3), 'a', 'b', 'c'))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<63))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := func() *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
		if v, err := readValue(rd(), "get"); err == nil {
			if n := binary.LittleEndian.Uint64(data); n != uint64(len(v)) || len(data) < 8+len(v) {
				t.Fatalf("value of %d bytes from %d bytes", len(v), len(data))
			}
		}
		if ok, err := readCheck(rd()); err == nil && ok != (data[0] == 0) {
			t.Fatal("check misread")
		}
		if b, err := readWait(rd()); err == nil && b > 1 {
			t.Fatal("wait misread")
		}
		if n, err := readCount(rd(), "handshake"); err == nil && n < 0 {
			t.Fatal("negative count")
		}
	})
}

// FuzzStoreHandshake: whatever a server answers to the handshake, DialStore
// returns (an error or a store) at once, and never panics.
func FuzzStoreHandshake(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add(make([]byte, 12), false)
	f.Add(make([]byte, 8), true)
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n"), false)
	f.Fuzz(func(t *testing.T, reply []byte, hold bool) {
		client, server := net.Pipe()
		go func() {
			io.ReadFull(server, make([]byte, 11))
			server.Write(reply)
			if hold { // keep the connection open: the deadline ends it
				time.Sleep(50 * time.Millisecond)
			}
			server.Close()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		s := &Store{addr: "pipe", sem: make(chan struct{}, 1)}
		start := time.Now()
		_, err := s.handshake(ctx, client, bufio.NewReader(client))
		if time.Since(start) > 20*time.Millisecond+slack {
			t.Fatalf("handshake took %v", time.Since(start))
		}
		_ = err
		client.Close()
	})
}
