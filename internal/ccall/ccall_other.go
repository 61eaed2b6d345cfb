//go:build !(linux && (amd64 || arm64))

package ccall

func init() { panic("gonccl supports linux/amd64 and linux/arm64 only") }
