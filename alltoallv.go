package nccl

import (
	"unsafe"

	"github.com/gonccl/nccl/internal/capi"
)

// Layout gives the counts and displacements of an all-to-all-v, in elements.
//
// In the matrix form each slice holds Size()×Size() entries and row i belongs to
// rank i, as VCCL's ncclAlltoAllv reads them: SendCounts[i*n+j] elements go
// from rank i, starting at SendDispls[i*n+j] of its send buffer, to rank j,
// which stores them from RecvDispls[j*n+i] of its receive buffer;
// RecvCounts[j*n+i] must equal SendCounts[i*n+j]. Every rank passes the same
// matrices (the sender reads the receiver's displacement).
//
// In the local form (MPI's Alltoallv) each slice holds Size() entries: this
// rank's row. What the rank sends to itself is what it receives from itself:
// SendCounts[rank] must equal RecvCounts[rank].
type Layout struct {
	SendCounts, SendDispls, RecvCounts, RecvDispls []uint64
}

// AlltoAllv exchanges uneven blocks between all ranks (see Layout). With the
// matrix form on buffers from AllocSymmetric and a library that has it (VCCL),
// it runs the native ncclAlltoAllv; otherwise grouped Send/Recv, as PyTorch and
// nccl-tests do, with the same result. The local form always runs grouped: the
// native call needs every rank's row. send and recv must not overlap.
// On a stream capturing a CUDA graph the exchange runs grouped too: VCCL's
// native call cannot be captured (2.29.2 aborts the process); with
// SetPath(Native) a capture gets an *UnsupportedError.
//
// The native call writes into peers' receive buffers as soon as their data is
// ready, with no "receiver ready" handshake (VCCL's src/rma: the puts wait only
// for the sender's data, the receiver waits only for the puts): a peer's data
// may land before this rank's stream reaches the call. Before an exchange,
// make sure every rank is done with its receive buffer, reading and writing:
// work still queued on a rank's stream before the call (a memset, a kernel
// reading the last exchange) races with the peers' puts. A host barrier
// across the ranks after that work is enough; the grouped form (SetPath(Grouped))
// needs none. NCCL reads the
// matrices until the enclosing group ends: gonccl keeps them pinned until no
// Group is open; do not change them before.
func (c *Comm) AlltoAllv(send, recv Buffer, m Layout, s Stream) error {
	if !c.made() {
		return zeroComm("AlltoAllv")
	}
	const name = "AlltoAllv"
	n := c.nranks
	// One rank's row and the whole matrix are the same with one rank.
	local := len(m.SendCounts) == n && n > 1
	if err := m.check(n, c.rank, send.n, recv.n, local); err != nil {
		return err
	}
	if err := c.checkBuf(name, "send", send, recv.dt, send.n, s); err != nil {
		return err
	}
	if err := c.checkBuf(name, "recv", recv, recv.dt, recv.n, s); err != nil {
		return err
	}
	if overlap(send, recv) {
		return argError(name, "send and recv overlap: all-to-all-v cannot run in place")
	}
	native, err := c.route(capi.FnAlltoAllv)
	if err != nil {
		return err
	}
	windows := send.Window() != 0 && recv.Window() != 0
	if Path(c.path.Load()) == Native && (local || !windows) {
		return argError(name, "the native ncclAlltoAllv needs the matrix form and buffers from AllocSymmetric")
	}
	if native && !local && windows {
		if !capturesGraph(s) {
			return c.alltoallvNative(send, recv, m, s)
		}
		// VCCL 2.29.2 cannot capture its native call: ncclLaunchRmaColl
		// asserts "RMA Collective does not support cuda graph yet."
		// (src/rma/rma_coll.cc) and the process aborts. Captured, the
		// exchange runs grouped.
		if Path(c.path.Load()) == Native {
			l := c.lib
			return &UnsupportedError{Name: "ncclAlltoAllv in a CUDA graph capture", Path: l.Path, Version: l.version,
				Requires: "a library that can capture it (VCCL 2.29.2 aborts the process); SetPath(Auto) runs it grouped"}
		}
	}
	row := m
	if !local {
		row = m.row(c.rank, n)
	}
	g, mark, err := c.lib.groupBegin()
	if err != nil {
		return err
	}
	dt := recv.dt
	for p := range n {
		if k := int(row.SendCounts[p]); k > 0 {
			if err = c.p2p(g, capi.FnSend, send.ptr+offset(dt, int(row.SendDispls[p])), k, dt, p, s); err != nil {
				break
			}
		}
		if k := int(row.RecvCounts[p]); k > 0 {
			if err = c.p2p(g, capi.FnRecv, recv.ptr+offset(dt, int(row.RecvDispls[p])), k, dt, p, s); err != nil {
				break
			}
		}
	}
	return c.lib.groupEnd(g, mark, err)
}

// alltoallvNative calls VCCL's ncclAlltoAllv in the form the library was opened
// with (10 or 11 arguments; relay buffers serve transfers across nodes and are
// NULL here).
func (c *Comm) alltoallvNative(send, recv Buffer, m Layout, s Stream) error {
	l := c.lib
	pin := l.pinner()
	for _, v := range [][]uint64{m.SendCounts, m.SendDispls, m.RecvCounts, m.RecvDispls} {
		pin.Pin(&v[0])
	}
	sc, sd := uintptr(unsafe.Pointer(&m.SendCounts[0])), uintptr(unsafe.Pointer(&m.SendDispls[0]))
	rc, rd := uintptr(unsafe.Pointer(&m.RecvCounts[0])), uintptr(unsafe.Pointer(&m.RecvDispls[0]))
	var err error
	if l.a2avABI == 10 {
		var o capi.Op
		capi.AlltoAllv10(&o, uintptr(send.ptr), sc, sd, uintptr(recv.ptr), rc, rd, 0, recv.dt, s.h)
		err = c.stream(&o)
	} else {
		var o capi.Op
		capi.AlltoAllv11(&o, uintptr(send.ptr), sc, sd, uintptr(recv.ptr), rc, rd, 0, 0, recv.dt, s.h)
		err = c.stream(&o)
	}
	l.unpinAfter(pin) // inside a group, NCCL reads them when it launches
	return err
}

// row is rank me's row of a matrix layout, as a local layout.
func (m Layout) row(me, n int) Layout {
	return Layout{
		SendCounts: m.SendCounts[me*n : (me+1)*n], SendDispls: m.SendDispls[me*n : (me+1)*n],
		RecvCounts: m.RecvCounts[me*n : (me+1)*n], RecvDispls: m.RecvDispls[me*n : (me+1)*n],
	}
}

func layoutError(format string, args ...any) error { return argError("AlltoAllv", format, args...) }

// check validates the layout's form and that this rank's blocks lie inside its
// buffers; the matrix form must also be consistent between senders and
// receivers.
func (m Layout) check(n, me, sendLen, recvLen int, local bool) error {
	want := n * n
	if local {
		want = n
	}
	for _, f := range []struct {
		name string
		v    []uint64
	}{{"SendCounts", m.SendCounts}, {"SendDispls", m.SendDispls}, {"RecvCounts", m.RecvCounts}, {"RecvDispls", m.RecvDispls}} {
		if len(f.v) != want {
			return layoutError("%s has %d entries, want %d (one row) or %d (the matrix)", f.name, len(f.v), n, n*n)
		}
	}
	row := 0
	if local && m.SendCounts[me] != m.RecvCounts[me] {
		// The exchange's Send to this rank and its Recv from it pair up in
		// its group; NCCL refuses a half left alone at the group's end (see
		// Comm.checkSelf), the matrix form's check below covers it too.
		return layoutError("rank %d sends %d elements to itself and expects %d", me, m.SendCounts[me], m.RecvCounts[me])
	}
	if !local {
		row = me
		for i := range n {
			for j := range n {
				if m.SendCounts[i*n+j] != m.RecvCounts[j*n+i] {
					return layoutError("rank %d sends %d elements to rank %d, which expects %d", i, m.SendCounts[i*n+j], j, m.RecvCounts[j*n+i])
				}
			}
		}
	}
	for j := range n {
		k := row*n + j
		if m.SendDispls[k] > uint64(sendLen) || m.SendCounts[k] > uint64(sendLen)-m.SendDispls[k] {
			return layoutError("block to rank %d (displacement %d, count %d) overruns the send buffer of %d", j, m.SendDispls[k], m.SendCounts[k], sendLen)
		}
		if m.RecvDispls[k] > uint64(recvLen) || m.RecvCounts[k] > uint64(recvLen)-m.RecvDispls[k] {
			return layoutError("block from rank %d (displacement %d, count %d) overruns the receive buffer of %d", j, m.RecvDispls[k], m.RecvCounts[k], recvLen)
		}
	}
	return nil
}

// capturesGraph reports whether s is capturing a CUDA graph, by whomever: one
// cudaStreamIsCapturing. The legacy stream cannot capture, and a stream
// whose state cannot be read counts as not capturing.
func capturesGraph(s Stream) bool {
	if s.h == 0 {
		return false
	}
	st, err := s.Capturing()
	return err == nil && st != CaptureNone
}
