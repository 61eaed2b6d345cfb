// Package goid identifies the running goroutine.
//
// A Group records the operations its goroutine issues and lets others pass
// straight to NCCL, so the operation path must tell which goroutine is
// calling, in a nanosecond and without allocating. Go offers no goroutine
// identity; the address of the runtime's g structure of the running goroutine
// is one: it does not change while the goroutine lives, and no two live
// goroutines share it. The runtime keeps it in thread-local storage (amd64)
// or in a register (arm64); Current reads it there.
package goid
