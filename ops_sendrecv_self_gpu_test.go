//go:build gpu

package nccl_test

import (
	"testing"

	"github.com/gonccl/nccl"
)

// The Send/Recv-to-self tests of ops_sendrecv_self_test.go on real NCCL.
func TestGPUSendRecvSelf(t *testing.T) {
	selfOpen = func(t *testing.T) *nccl.Library { l, _ := openReal(t); return l }
	t.Run("outside a Group", TestSendRecvSelfOutsideGroup)
	t.Run("in a Group", TestSendRecvSelfInGroup)
}
