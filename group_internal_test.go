package nccl

import (
	"runtime"
	"testing"
)

// A panic inside Group never released the all-to-all-v matrices the group
// pinned: the count of open groups stayed up.
func TestLifecyclePanicInGroupReleasesPins(t *testing.T) {
	l, err := Open(WithLibrary(FakeNCCL(t, "default")), WithCUDARuntime(FakeCUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { recover() }()
		l.Group(func() error {
			// What AlltoAllv leaves while a group is open.
			p := new(runtime.Pinner)
			p.Pin(new(uint64))
			l.pinsMu.Lock()
			l.pins = append(l.pins, p)
			l.pinsMu.Unlock()
			panic("boom")
		})
	}()
	if n := l.groupsOpen.Load(); n != 0 {
		t.Fatalf("%d groups still open after the panic", n)
	}
	if len(l.pins) != 0 {
		t.Fatalf("%d pinners still held", len(l.pins))
	}
}
