package collectives

import (
	"fmt"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/abi"
)

// Every operation checks its buffers before any C call: the lengths against the
// counts and the number of ranks, and that each buffer is on the communicator's
// device. It then enqueues on stream s and returns; nothing here synchronises.
// A closed communicator is refused by the layer below with nccl.ErrClosed.

// Path says how an operation ran.
type Path int

const (
	// Native: the library's own function (ncclAlltoAll, ncclGather, ncclScatter,
	// VCCL's ncclAlltoAllv).
	Native Path = iota
	// Grouped: ncclSend and ncclRecv to every peer inside one group, as PyTorch
	// does where the library lacks the function.
	Grouped
)

func (p Path) String() string {
	if p == Native {
		return "native"
	}
	return "grouped"
}

func check[T Element](op string, c *nccl.Comm, name string, b Buffer[T], want int) error {
	if b.n != want {
		return &nccl.Error{Op: op, Code: abi.InvalidArgument, Msg: fmt.Sprintf("%s has %d elements, want %d", name, b.n, want)}
	}
	if want > 0 && b.dev != c.Device() {
		return &nccl.Error{Op: op, Code: abi.InvalidArgument, Msg: fmt.Sprintf("%s is on device %d, the communicator on device %d", name, b.dev, c.Device())}
	}
	return nil
}

// AllReduce reduces send across ranks into recv on every rank; both hold the
// same number of elements (recv may be send: in place).
func AllReduce[T Element](c *nccl.Comm, send, recv Buffer[T], op abi.RedOp, s nccl.Stream) error {
	const name = "AllReduce"
	if err := check(name, c, "send", send, recv.n); err != nil {
		return err
	}
	if err := check(name, c, "recv", recv, recv.n); err != nil {
		return err
	}
	return c.AllReduce(send.ptr, recv.ptr, recv.n, TypeOf[T](), op, s)
}

// Broadcast copies root's send into every rank's recv. send is read on root only;
// other ranks may pass an empty Buffer. recv may be send on root (in place).
func Broadcast[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream) error {
	const name = "Broadcast"
	if err := checkRoot(name, c, root); err != nil {
		return err
	}
	if err := check(name, c, "recv", recv, recv.n); err != nil {
		return err
	}
	if c.Rank() == root {
		if err := check(name, c, "send", send, recv.n); err != nil {
			return err
		}
	} else if send.n == 0 {
		send.ptr = recv.ptr
	}
	return c.Broadcast(send.ptr, recv.ptr, recv.n, TypeOf[T](), root, s)
}

// Reduce reduces send across ranks into root's recv. Other ranks may pass an
// empty recv.
func Reduce[T Element](c *nccl.Comm, send, recv Buffer[T], op abi.RedOp, root int, s nccl.Stream) error {
	const name = "Reduce"
	if err := checkRoot(name, c, root); err != nil {
		return err
	}
	if err := check(name, c, "send", send, send.n); err != nil {
		return err
	}
	if c.Rank() == root {
		if err := check(name, c, "recv", recv, send.n); err != nil {
			return err
		}
	} else if recv.n == 0 {
		recv.ptr = send.ptr
	}
	return c.Reduce(send.ptr, recv.ptr, send.n, TypeOf[T](), op, root, s)
}

// AllGather gathers every rank's send into recv, which holds Count()×len(send)
// elements, rank i's block at i×len(send). In place: send = recv.Slice(rank*k, (rank+1)*k).
func AllGather[T Element](c *nccl.Comm, send, recv Buffer[T], s nccl.Stream) error {
	const name = "AllGather"
	if err := check(name, c, "send", send, send.n); err != nil {
		return err
	}
	if err := check(name, c, "recv", recv, send.n*c.Count()); err != nil {
		return err
	}
	return c.AllGather(send.ptr, recv.ptr, send.n, TypeOf[T](), s)
}

// ReduceScatter reduces send (Count()×len(recv) elements) across ranks and leaves
// block rank in recv. In place: recv = send.Slice(rank*k, (rank+1)*k).
func ReduceScatter[T Element](c *nccl.Comm, send, recv Buffer[T], op abi.RedOp, s nccl.Stream) error {
	const name = "ReduceScatter"
	if err := check(name, c, "recv", recv, recv.n); err != nil {
		return err
	}
	if err := check(name, c, "send", send, recv.n*c.Count()); err != nil {
		return err
	}
	return c.ReduceScatter(send.ptr, recv.ptr, recv.n, TypeOf[T](), op, s)
}

// Send sends buf to peer; the peer posts a Recv of the same length. A rank that
// both sends and receives does so inside one Group.
func Send[T Element](c *nccl.Comm, buf Buffer[T], peer int, s nccl.Stream) error {
	if err := checkPeer("Send", c, peer); err != nil {
		return err
	}
	if err := check("Send", c, "buf", buf, buf.n); err != nil {
		return err
	}
	return c.Send(buf.ptr, buf.n, TypeOf[T](), peer, s)
}

// Recv receives into buf from peer.
func Recv[T Element](c *nccl.Comm, buf Buffer[T], peer int, s nccl.Stream) error {
	if err := checkPeer("Recv", c, peer); err != nil {
		return err
	}
	if err := check("Recv", c, "buf", buf, buf.n); err != nil {
		return err
	}
	return c.Recv(buf.ptr, buf.n, TypeOf[T](), peer, s)
}

// AlltoAll sends block j of send to rank j and receives rank j's block into
// block j of recv; both hold Count()×k elements. It runs ncclAlltoAll where the
// library has it (NCCL >= 2.28), else grouped Send/Recv with the same result.
// send and recv must not overlap: no path of NCCL's runs AlltoAll in place.
func AlltoAll[T Element](c *nccl.Comm, send, recv Buffer[T], s nccl.Stream) (Path, error) {
	return alltoall(c, send, recv, s, pathFor(c, "ncclAlltoAll"))
}

// AlltoAllGrouped is AlltoAll through grouped Send/Recv whatever the library has.
func AlltoAllGrouped[T Element](c *nccl.Comm, send, recv Buffer[T], s nccl.Stream) error {
	_, err := alltoall(c, send, recv, s, Grouped)
	return err
}

func alltoall[T Element](c *nccl.Comm, send, recv Buffer[T], s nccl.Stream, path Path) (Path, error) {
	const name = "AlltoAll"
	n := c.Count()
	if send.n%n != 0 {
		return path, &nccl.Error{Op: name, Code: abi.InvalidArgument, Msg: fmt.Sprintf("send has %d elements, not a multiple of %d ranks", send.n, n)}
	}
	if err := check(name, c, "send", send, send.n); err != nil {
		return path, err
	}
	if err := check(name, c, "recv", recv, send.n); err != nil {
		return path, err
	}
	if overlap(send, recv) {
		// Peers would read blocks of send while recv overwrites them: NCCL's
		// own ncclAlltoAll is concurrent sends and receives too (seen
		// corrupting an in-place exchange on H200 with NCCL 2.28.3).
		return path, &nccl.Error{Op: name, Code: abi.InvalidArgument, Msg: "send and recv overlap: AlltoAll cannot run in place (NCCL exchanges the blocks with concurrent sends and receives)"}
	}
	k := send.n / n
	if path == Native {
		return path, c.AlltoAll(send.ptr, recv.ptr, k, TypeOf[T](), s)
	}
	return path, c.Library().Group(func() error {
		for p := range n {
			if err := c.Send(send.ptr+offset[T](p*k), k, TypeOf[T](), p, s); err != nil {
				return err
			}
			if err := c.Recv(recv.ptr+offset[T](p*k), k, TypeOf[T](), p, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// Gather collects every rank's send into root's recv (Count()×len(send) elements,
// rank i's block at i×len(send)); other ranks may pass an empty recv. Native on
// NCCL >= 2.28, grouped Send/Recv before.
func Gather[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream) (Path, error) {
	return gather(c, send, recv, root, s, pathFor(c, "ncclGather"))
}

// GatherGrouped is Gather through grouped Send/Recv whatever the library has.
func GatherGrouped[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream) error {
	_, err := gather(c, send, recv, root, s, Grouped)
	return err
}

func gather[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream, path Path) (Path, error) {
	const name = "Gather"
	if err := checkRoot(name, c, root); err != nil {
		return path, err
	}
	if err := check(name, c, "send", send, send.n); err != nil {
		return path, err
	}
	me, n, k := c.Rank(), c.Count(), send.n
	if me == root {
		if err := check(name, c, "recv", recv, k*n); err != nil {
			return path, err
		}
	}
	if path == Native {
		if me != root && recv.n == 0 {
			recv.ptr = send.ptr
		}
		return path, c.Gather(send.ptr, recv.ptr, k, TypeOf[T](), root, s)
	}
	return path, c.Library().Group(func() error {
		if me == root {
			for p := range n {
				if err := c.Recv(recv.ptr+offset[T](p*k), k, TypeOf[T](), p, s); err != nil {
					return err
				}
			}
		}
		return c.Send(send.ptr, k, TypeOf[T](), root, s)
	})
}

// Scatter sends block i of root's send (Count()×len(recv) elements) to rank i's
// recv; other ranks may pass an empty send. Native on NCCL >= 2.28, grouped before.
func Scatter[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream) (Path, error) {
	return scatter(c, send, recv, root, s, pathFor(c, "ncclScatter"))
}

// ScatterGrouped is Scatter through grouped Send/Recv whatever the library has.
func ScatterGrouped[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream) error {
	_, err := scatter(c, send, recv, root, s, Grouped)
	return err
}

func scatter[T Element](c *nccl.Comm, send, recv Buffer[T], root int, s nccl.Stream, path Path) (Path, error) {
	const name = "Scatter"
	if err := checkRoot(name, c, root); err != nil {
		return path, err
	}
	if err := check(name, c, "recv", recv, recv.n); err != nil {
		return path, err
	}
	me, n, k := c.Rank(), c.Count(), recv.n
	if me == root {
		if err := check(name, c, "send", send, k*n); err != nil {
			return path, err
		}
	}
	if path == Native {
		if me != root && send.n == 0 {
			send.ptr = recv.ptr
		}
		return path, c.Scatter(send.ptr, recv.ptr, k, TypeOf[T](), root, s)
	}
	return path, c.Library().Group(func() error {
		if me == root {
			for p := range n {
				if err := c.Send(send.ptr+offset[T](p*k), k, TypeOf[T](), p, s); err != nil {
					return err
				}
			}
		}
		return c.Recv(recv.ptr, k, TypeOf[T](), root, s)
	})
}

// PreMulSum creates the reduction "sum of scalar×x" for T on c (NCCL >= 2.11).
// Destroy it with c.DestroyRedOp once the operations using it are enqueued.
func PreMulSum[T Element](c *nccl.Comm, scalar T) (abi.RedOp, error) {
	b := make([]T, 1)
	b[0] = scalar
	return c.CreatePreMulSum(asBytes(b), TypeOf[T]())
}

func pathFor(c *nccl.Comm, fn string) Path {
	if c.Library().Has(fn) {
		return Native
	}
	return Grouped
}

func offset[T Element](elems int) nccl.DevicePtr { return nccl.DevicePtr(elems * elemSize[T]()) }

// overlap reports whether two buffers share memory.
func overlap[T Element](a, b Buffer[T]) bool {
	return a.n > 0 && b.n > 0 && a.ptr < b.ptr+offset[T](b.n) && b.ptr < a.ptr+offset[T](a.n)
}

func checkRoot(op string, c *nccl.Comm, root int) error {
	if root < 0 || root >= c.Count() {
		return &nccl.Error{Op: op, Code: abi.InvalidArgument, Msg: fmt.Sprintf("root %d of %d ranks", root, c.Count())}
	}
	return nil
}

func checkPeer(op string, c *nccl.Comm, peer int) error {
	if peer < 0 || peer >= c.Count() {
		return &nccl.Error{Op: op, Code: abi.InvalidArgument, Msg: fmt.Sprintf("peer %d of %d ranks", peer, c.Count())}
	}
	return nil
}
