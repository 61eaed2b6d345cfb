package nccl

import (
	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// SuspendMem is NCCL_SUSPEND_MEM, the Comm.Suspend flag that releases the
// communicator's dynamic GPU memory.
const SuspendMem = abi.SuspendMem

// Suspend releases what flags names (SuspendMem: the communicator's dynamic
// GPU memory) until Resume (ncclCommSuspend, NCCL >= 2.29.7). A suspended
// communicator takes no operations. Call it with no work in flight.
func (c *Comm) Suspend(flags int) error {
	if !c.made() {
		return zeroComm("Suspend")
	}
	const op = "ncclCommSuspend"
	if c.lib.nc.Fn[capi.FnCommSuspend] == 0 {
		return c.lib.unsupported(capi.FnCommSuspend)
	}
	if flags&^SuspendMem != 0 {
		return argError(op, "flags %#x: want SuspendMem", flags)
	}
	h, err := c.enter(op, false)
	if err != nil {
		return err
	}
	err = c.lib.nc.CommSuspend(h, int32(flags))
	c.exit()
	return c.settled(op, err)
}

// Resume gives back what Suspend released (ncclCommResume, NCCL >= 2.29.7).
func (c *Comm) Resume() error {
	if !c.made() {
		return zeroComm("Resume")
	}
	const op = "ncclCommResume"
	if c.lib.nc.Fn[capi.FnCommResume] == 0 {
		return c.lib.unsupported(capi.FnCommResume)
	}
	h, err := c.enter(op, false)
	if err != nil {
		return err
	}
	err = c.lib.nc.CommResume(h)
	c.exit()
	return c.settled(op, err)
}

// MemStats is the communicator's GPU memory as NCCL's memory manager counts
// it (ncclCommMemStats).
type MemStats struct {
	Suspendable uint64 // ncclStatGpuMemSuspend: bytes Suspend(SuspendMem) would release
	Suspended   bool   // ncclStatGpuMemSuspended
	Persistent  uint64 // ncclStatGpuMemPersist: bytes that stay
	Total       uint64 // ncclStatGpuMemTotal
}

// ncclCommMemStat_t values.
const (
	statGpuMemSuspend   = 0
	statGpuMemSuspended = 1
	statGpuMemPersist   = 2
	statGpuMemTotal     = 3
)

// MemStats reads the communicator's memory statistics (ncclCommMemStats, NCCL
// >= 2.29.7).
func (c *Comm) MemStats() (MemStats, error) {
	if !c.made() {
		var z0 MemStats
		return z0, zeroComm("MemStats")
	}
	const op = "ncclCommMemStats"
	if c.lib.nc.Fn[capi.FnCommMemStats] == 0 {
		return MemStats{}, c.lib.unsupported(capi.FnCommMemStats)
	}
	h, err := c.enter(op, false)
	if err != nil {
		return MemStats{}, err
	}
	defer c.exit()
	v := new([4]uint64)
	for stat := range v {
		if err := c.lib.nc.CommMemStats(h, int32(stat), &v[stat]); err != nil {
			return MemStats{}, err
		}
	}
	return MemStats{Suspendable: v[statGpuMemSuspend], Suspended: v[statGpuMemSuspended] != 0,
		Persistent: v[statGpuMemPersist], Total: v[statGpuMemTotal]}, nil
}
