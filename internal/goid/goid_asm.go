//go:build linux && (amd64 || arm64)

package goid

// Current is an identity of the calling goroutine, valid while it runs: a
// goroutine that has ended may leave its identity to a new one.
func Current() uintptr
