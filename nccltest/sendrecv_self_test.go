package nccltest_test

import (
	"testing"

	"github.com/gonccl/nccl/abi"
)

// TestFakeSendRecvSelf: the fake refuses a Send to the communicator's own
// rank, or a Recv from it, that its group does not pair, as NCCL does
// (enqueue.cc, scheduleP2pTasksToPlan, at the group's end; a call outside a
// group is a group of its own): ncclInvalidUsage with NCCL's text. Outside a
// group a blocking communicator's call fails at once and enqueues nothing
// (before, the fake took the lone Send, whose stream then waited for good); a
// non-blocking one's launch fails after the call and leaves the communicator
// in that error, as groupCleanup leaves it. Inside a group the pair runs, and
// a group of one half fails at ncclGroupEnd. Called directly, as a C program
// would: gonccl refuses the lone halves itself.
func TestFakeSendRecvSelf(t *testing.T) {
	const sendText = "Trying to send to self without a matching recv"
	const recvText = "Trying to recv to self without a matching send"
	for _, variant := range []string{"default", "v230", "old"} {
		for _, nranks := range []int{1, 2} {
			t.Run(variant+"/blocking/"+[]string{"", "1rank", "2ranks"}[nranks], func(t *testing.T) {
				f := newFakeDrv(t, variant)
				comms := f.initAll(nranks)
				for _, c := range comms {
					defer f.call("ncclCommAbort", c)
				}
				me := nranks - 1
				c := comms[me]
				s := f.stream(me)
				in, out := f.floats(me, 64, 3), f.floats(me, 64, -1)
				f.expect("ncclSend to itself outside a group", f.send(in, me, c, s), abi.InvalidUsage)
				wantText(t, "ncclSend to itself", f.lastError(), sendText)
				f.expect("ncclRecv from itself outside a group", f.recv(out, me, c, s), abi.InvalidUsage)
				wantText(t, "ncclRecv from itself", f.lastError(), recvText)
				f.sync(s) // nothing was enqueued
				f.check("the refused receive's buffer", out, -1)
				if st := f.asyncErr(c); st != abi.Success {
					t.Fatalf("the blocking communicator after the refusals: %v", st)
				}
				// One half alone in a group: refused at ncclGroupEnd.
				r := f.group(func() { f.expect("ncclSend in a group", f.send(in, me, c, s), abi.Success) })
				f.expect("ncclGroupEnd of a lone Send to itself", r, abi.InvalidUsage)
				wantText(t, "ncclGroupEnd of a lone Send to itself", f.lastError(), sendText)
				r = f.group(func() {
					f.expect("ncclRecv in a group", f.recv(out, me, c, s), abi.Success)
					f.expect("ncclRecv in a group", f.recv(out, me, c, s), abi.Success)
					f.expect("ncclSend in a group", f.send(in, me, c, s), abi.Success)
				})
				f.expect("ncclGroupEnd of two Recvs and one Send to itself", r, abi.InvalidUsage)
				wantText(t, "ncclGroupEnd of two Recvs and one Send", f.lastError(), recvText)
				f.sync(s)
				f.check("the receive of a refused group", out, -1)
				// The pair in one group runs.
				r = f.group(func() {
					f.expect("ncclRecv in a group", f.recv(out, me, c, s), abi.Success)
					f.expect("ncclSend in a group", f.send(in, me, c, s), abi.Success)
				})
				f.expect("ncclGroupEnd of a Send/Recv to itself", r, abi.Success)
				f.sync(s)
				f.check("the receive from itself", out, 3)
			})
		}
		t.Run(variant+"/non-blocking", func(t *testing.T) {
			f := newFakeDrv(t, variant)
			for _, half := range []string{"send", "recv"} {
				c := f.initNonBlocking(1)[0]
				s := f.stream(0)
				b := f.floats(0, 64, -1)
				aborted := false
				t.Cleanup(func() { // a lone half the fake took would hold the stream for good
					if !aborted {
						f.call("ncclCommAbort", c)
					}
				})
				var res abi.Result
				text := sendText
				if half == "send" {
					res = f.send(b, 0, c, s)
				} else {
					res, text = f.recv(b, 0, c, s), recvText
				}
				if res != abi.InProgress && res != abi.InvalidUsage {
					t.Fatalf("a lone %s to itself: %v (%s), want ncclInProgress or ncclInvalidUsage", half, res, f.lastError())
				}
				f.expect("the state after a lone "+half+" to itself", f.settle(c), abi.InvalidUsage)
				wantText(t, "a lone "+half+" to itself", f.lastError(), text)
				f.sync(s)
				f.check("the buffer of a lone "+half, b, -1)
				f.expect("the state later", f.asyncErr(c), abi.InvalidUsage)
				f.expect("ncclCommAbort", f.call("ncclCommAbort", c), abi.Success)
				aborted = true
			}
		})
	}
}
