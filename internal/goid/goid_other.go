//go:build !(linux && (amd64 || arm64))

package goid

func Current() uintptr { panic("gonccl supports linux/amd64 and linux/arm64 only") }
