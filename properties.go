package nccl

import (
	"encoding/binary"
	"unsafe"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// GinType is ncclGinType_t: how a communicator's GPU-initiated networking
// reaches other nodes.
type GinType int32

const (
	GinNone  GinType = 0 // NCCL_GIN_TYPE_NONE
	GinProxy GinType = 2 // NCCL_GIN_TYPE_PROXY
	GinGDAKI GinType = 3 // NCCL_GIN_TYPE_GDAKI
	GinGPI   GinType = 4 // NCCL_GIN_TYPE_GPI
)

// Properties is what ncclCommQueryProperties reports (ncclCommProperties_t).
// The fields after GinType come with NCCL 2.29.7 (struct version > 2.29.3)
// and are zero before.
type Properties struct {
	Rank, Size    int
	CUDADevice    int
	NVMLDevice    int
	DeviceAPI     bool    // deviceApiSupport: the device API (symmetric kernels) works
	Multimem      bool    // multimemSupport: NVLink SHARP multicast
	GinType       GinType // ginType
	LsaTeams      int     // nLsaTeams
	HostRMA       bool    // hostRmaSupport: PutSignal, Signal, WaitSignal work
	RailedGinType GinType // railedGinType
}

// ncclCommProperties_t: size_t size; unsigned magic, version; then int rank
// (16), nRanks (20), cudaDev (24), nvmlDev (28); bool deviceApiSupport (32),
// multimemSupport (33); ncclGinType_t ginType (36); from 2.29.7 int nLsaTeams
// (40), bool hostRmaSupport (44), ncclGinType_t railedGinType (48). sizeof is
// 40, then 56.
const (
	propsSize2292 = 40
	propsSize2297 = 56
)

// Properties queries the communicator (ncclCommQueryProperties, NCCL >= 2.29.2),
// with the struct laid out as the loaded release declares it.
func (c *Comm) Properties() (Properties, error) {
	if !c.made() {
		var z0 Properties
		return z0, zeroComm("Properties")
	}
	const op = "ncclCommQueryProperties"
	if c.lib.nc.Fn[capi.FnCommQueryProperties] == 0 {
		return Properties{}, c.lib.unsupported(capi.FnCommQueryProperties)
	}
	v := c.lib.version
	size := propsSize2292
	if v.AtLeast(abi.V(2, 29, 4)) {
		size = propsSize2297
	}
	buf := new([propsSize2297]byte)
	ne := binary.NativeEndian
	ne.PutUint64(buf[0:], uint64(size))
	ne.PutUint32(buf[8:], abi.ConfigMagic) // NCCL_API_MAGIC
	ne.PutUint32(buf[12:], uint32(v.Code()))
	h, err := c.enter(op, false)
	if err != nil {
		return Properties{}, err
	}
	err = c.lib.nc.CommQueryProperties(h, unsafe.Pointer(buf))
	c.exit()
	if err != nil {
		return Properties{}, err
	}
	i32 := func(off int) int32 { return int32(ne.Uint32(buf[off:])) }
	p := Properties{
		Rank: int(i32(16)), Size: int(i32(20)), CUDADevice: int(i32(24)), NVMLDevice: int(i32(28)),
		DeviceAPI: buf[32] != 0, Multimem: buf[33] != 0, GinType: GinType(i32(36)),
	}
	if size == propsSize2297 {
		p.LsaTeams, p.HostRMA, p.RailedGinType = int(i32(40)), buf[44] != 0, GinType(i32(48))
	}
	return p, nil
}

// CTA policies for Config.CTAPolicy (NCCL_CTA_POLICY_*).
const (
	CTAPolicyDefault    = abi.CTAPolicyDefault    // 2.27
	CTAPolicyEfficiency = abi.CTAPolicyEfficiency // 2.27
	CTAPolicyZero       = abi.CTAPolicyZero       // 2.28
)
