package nccl

import (
	"encoding/binary"
	"testing"
)

// FuzzLayout feeds arbitrary counts and displacements to the all-to-all-v checks:
// they never panic, and whatever they accept keeps every block of this rank
// inside its buffers and every send matched by the receiver's count.
func FuzzLayout(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 2, 1, 64, 64)
	f.Add([]byte{}, 1, 0, 0, 0)
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255, 1}, 3, 2, 10, 10)
	f.Fuzz(func(t *testing.T, raw []byte, n, me, sendLen, recvLen int) {
		n = 1 + absInt(n)%5
		me = absInt(me) % n
		sendLen, recvLen = absInt(sendLen)%1000, absInt(recvLen)%1000
		next := func() uint64 {
			if len(raw) < 2 {
				return 0
			}
			v := uint64(binary.LittleEndian.Uint16(raw))
			raw = raw[2:]
			if v > 60000 {
				return ^uint64(0) - v // huge values: overflow attempts
			}
			return v % 50
		}
		m := Layout{make([]uint64, n*n), make([]uint64, n*n), make([]uint64, n*n), make([]uint64, n*n)}
		for i := range m.SendCounts {
			m.SendCounts[i], m.SendDispls[i], m.RecvDispls[i] = next(), next(), next()
		}
		for i := range n {
			for j := range n {
				m.RecvCounts[j*n+i] = m.SendCounts[i*n+j]
			}
		}
		if len(raw) > 0 && raw[0]%2 == 1 {
			m.RecvCounts[0]++ // a mismatch the check must see
		}
		if err := m.check(n, me, sendLen, recvLen, false); err != nil {
			return
		}
		for j := range n {
			k := me*n + j
			if m.SendDispls[k] > uint64(sendLen) || m.SendCounts[k] > uint64(sendLen)-m.SendDispls[k] ||
				m.RecvDispls[k] > uint64(recvLen) || m.RecvCounts[k] > uint64(recvLen)-m.RecvDispls[k] {
				t.Fatalf("accepted a block outside the buffers: %+v", m)
			}
			for i := range n {
				if m.SendCounts[i*n+j] != m.RecvCounts[j*n+i] {
					t.Fatalf("accepted mismatched counts")
				}
			}
		}
		if err := m.row(me, n).check(n, me, sendLen, recvLen, true); err != nil {
			t.Fatalf("the matrix passed but its row did not: %v", err)
		}
		// A row of the wrong length is refused in either form.
		if n > 1 {
			short := Layout{m.SendCounts[:n-1], m.SendDispls[:n-1], m.RecvCounts[:n-1], m.RecvDispls[:n-1]}
			if short.check(n, me, sendLen, recvLen, true) == nil || short.check(n, me, sendLen, recvLen, false) == nil {
				t.Fatalf("accepted %d entries for %d ranks", n-1, n)
			}
		}
	})
}

func absInt(v int) int {
	if v < 0 {
		if v == -v {
			return 0
		}
		return -v
	}
	return v
}
