package collectives

import (
	"fmt"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// Layout gives the counts and displacements of an all-to-all-v, in elements.
//
// In the matrix form (AlltoAllv, AlltoAllvGrouped) each slice holds
// Count()×Count() entries and row i belongs to rank i, as VCCL's ncclAlltoAllv
// reads them: SendCounts[i*n+j] elements go from rank i, starting at
// SendDispls[i*n+j] in its send buffer, to rank j, which stores them from
// RecvDispls[j*n+i] of its receive buffer; RecvCounts[j*n+i] must equal
// SendCounts[i*n+j]. Every rank passes the same matrices (the sender reads the
// receiver's displacement).
//
// In the local form (AlltoAllvLocal, MPI's Alltoallv) each slice holds Count()
// entries: this rank's row.
type Layout struct {
	SendCounts, SendDispls, RecvCounts, RecvDispls []uint64
}

// AlltoAllv exchanges uneven blocks between all ranks, with the whole matrices of
// every rank (see Layout). It calls VCCL's native ncclAlltoAllv when the loaded
// library has it and both buffers come from AllocSymmetric; otherwise it runs
// grouped Send/Recv, as PyTorch and nccl-tests do, with the same result. The
// Path says which ran.
//
// The native call writes into peers' receive buffers as soon as their data is
// ready, with no "receiver ready" handshake: before reusing a receive buffer for
// the next exchange, make sure every rank is done reading it (a barrier).
func AlltoAllv[T Element](c *nccl.Comm, send, recv Buffer[T], m Layout, s nccl.Stream) (Path, error) {
	if err := m.checkMatrix(c.Count(), c.Rank(), send.n, recv.n); err != nil {
		return Grouped, err
	}
	if err := checkBuffers(c, send, recv); err != nil {
		return Grouped, err
	}
	if c.Library().Has("ncclAlltoAllv") && send.win != 0 && recv.win != 0 {
		return Native, c.AlltoAllv(send.ptr, m.SendCounts, m.SendDispls, recv.ptr, m.RecvCounts, m.RecvDispls, 0, 0, TypeOf[T](), s)
	}
	n, me := c.Count(), c.Rank()
	return Grouped, grouped(c, send, recv, m.row(me, n), s)
}

// AlltoAllvGrouped is AlltoAllv through grouped Send/Recv whatever the library has.
func AlltoAllvGrouped[T Element](c *nccl.Comm, send, recv Buffer[T], m Layout, s nccl.Stream) error {
	if err := m.checkMatrix(c.Count(), c.Rank(), send.n, recv.n); err != nil {
		return err
	}
	if err := checkBuffers(c, send, recv); err != nil {
		return err
	}
	return grouped(c, send, recv, m.row(c.Rank(), c.Count()), s)
}

// AlltoAllvLocal is AlltoAllv with this rank's counts and displacements only
// (MPI's form: one entry per peer). It always runs grouped Send/Recv: the native
// call needs every rank's matrix.
func AlltoAllvLocal[T Element](c *nccl.Comm, send, recv Buffer[T], local Layout, s nccl.Stream) error {
	if err := local.checkLocal(c.Count(), send.n, recv.n); err != nil {
		return err
	}
	if err := checkBuffers(c, send, recv); err != nil {
		return err
	}
	return grouped(c, send, recv, local, s)
}

func checkBuffers[T Element](c *nccl.Comm, send, recv Buffer[T]) error {
	if err := check("AlltoAllv", c, "send", send, send.n); err != nil {
		return err
	}
	if overlap(send, recv) {
		return layoutError("send and recv overlap: all-to-all-v cannot run in place")
	}
	return check("AlltoAllv", c, "recv", recv, recv.n)
}

// grouped runs one rank's row as ncclSend/ncclRecv pairs inside one group.
func grouped[T Element](c *nccl.Comm, send, recv Buffer[T], row Layout, s nccl.Stream) error {
	dt := TypeOf[T]()
	return c.Library().Group(func() error {
		for p := range c.Count() {
			if n := int(row.SendCounts[p]); n > 0 {
				if err := c.Send(send.ptr+offset[T](int(row.SendDispls[p])), n, dt, p, s); err != nil {
					return err
				}
			}
			if n := int(row.RecvCounts[p]); n > 0 {
				if err := c.Recv(recv.ptr+offset[T](int(row.RecvDispls[p])), n, dt, p, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// row is rank me's row of a matrix layout, as a local layout.
func (m Layout) row(me, n int) Layout {
	return Layout{
		SendCounts: m.SendCounts[me*n : (me+1)*n], SendDispls: m.SendDispls[me*n : (me+1)*n],
		RecvCounts: m.RecvCounts[me*n : (me+1)*n], RecvDispls: m.RecvDispls[me*n : (me+1)*n],
	}
}

func layoutError(format string, args ...any) error {
	return &nccl.Error{Op: "AlltoAllv", Code: abi.InvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

func (m Layout) checkLengths(want int) error {
	for _, f := range []struct {
		name string
		v    []uint64
	}{{"SendCounts", m.SendCounts}, {"SendDispls", m.SendDispls}, {"RecvCounts", m.RecvCounts}, {"RecvDispls", m.RecvDispls}} {
		if len(f.v) != want {
			return layoutError("%s has %d entries, want %d", f.name, len(f.v), want)
		}
	}
	return nil
}

// checkRow checks that every block of one row lies inside the buffers.
func (m Layout) checkRow(row, n, sendLen, recvLen int) error {
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

func (m Layout) checkMatrix(n, me, sendLen, recvLen int) error {
	if err := m.checkLengths(n * n); err != nil {
		return err
	}
	for i := range n {
		for j := range n {
			if m.SendCounts[i*n+j] != m.RecvCounts[j*n+i] {
				return layoutError("rank %d sends %d elements to rank %d, which expects %d", i, m.SendCounts[i*n+j], j, m.RecvCounts[j*n+i])
			}
		}
	}
	return m.checkRow(me, n, sendLen, recvLen)
}

func (m Layout) checkLocal(n, sendLen, recvLen int) error {
	if err := m.checkLengths(n); err != nil {
		return err
	}
	return m.checkRow(0, n, sendLen, recvLen)
}
