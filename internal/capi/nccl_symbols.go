package capi

import "github.com/gonccl/nccl/abi"

// NCCL's functions, indexes into NCCLSymbols and NCCL.Fn.
const (
	FnGetVersion = iota
	FnGetUniqueID
	FnGetErrorString
	FnGetLastError
	FnCommInitRank
	FnCommInitRankConfig
	FnCommInitAll
	FnCommInitRankScalable
	FnCommSplit
	FnCommFinalize
	FnCommDestroy
	FnCommAbort
	FnCommGetAsyncError
	FnCommCount
	FnCommCuDevice
	FnCommUserRank
	FnAllReduce
	FnBroadcast
	FnReduce
	FnAllGather
	FnReduceScatter
	FnAlltoAll
	FnGather
	FnScatter
	FnSend
	FnRecv
	FnAlltoAllv
	FnGroupStart
	FnGroupEnd
	FnRedOpCreatePreMulSum
	FnRedOpDestroy
	FnCommRegister
	FnCommDeregister
	FnMemAlloc
	FnMemFree
	FnCommWindowRegister
	FnCommWindowDeregister
	FnCommShrink
	FnCommRevoke
	FnCommGetUniqueID
	FnCommGrow
	FnPutSignal
	FnSignal
	FnWaitSignal
	FnWinGetUserPtr
	FnGroupSimulateEnd
	FnCommQueryProperties
	FnCommSuspend
	FnCommResume
	FnCommMemStats
	FnParamBind
	FnParamGetI8
	FnParamGetI16
	FnParamGetI32
	FnParamGetI64
	FnParamGetU8
	FnParamGetU16
	FnParamGetU32
	FnParamGetU64
	FnParamGetStr
	FnParamGetParameter
	FnParamGetAllParameterKeys
	NumNCCL
)

// NCCLSymbols is NCCL's table: one row per function gonccl calls. A row with a
// Since that every supported release has is required; the others are probed.
var NCCLSymbols = [NumNCCL]Symbol{
	FnGetVersion:           {Name: "ncclGetVersion", Since: abi.V(2, 3, 0)},
	FnGetUniqueID:          {Name: "ncclGetUniqueId", Since: abi.V(2, 3, 0)},
	FnGetErrorString:       {Name: "ncclGetErrorString", Since: abi.V(2, 3, 0)},
	FnGetLastError:         {Name: "ncclGetLastError", Since: abi.V(2, 13, 0)},
	FnCommInitRank:         {Name: "ncclCommInitRank", Since: abi.V(2, 3, 0)},
	FnCommInitRankConfig:   {Name: "ncclCommInitRankConfig", Since: abi.V(2, 14, 0)},
	FnCommInitAll:          {Name: "ncclCommInitAll", Since: abi.V(2, 3, 0)},
	FnCommInitRankScalable: {Name: "ncclCommInitRankScalable", Since: abi.V(2, 23, 0)},
	FnCommSplit:            {Name: "ncclCommSplit", Since: abi.V(2, 18, 0)},
	FnCommFinalize:         {Name: "ncclCommFinalize", Since: abi.V(2, 14, 0)},
	FnCommDestroy:          {Name: "ncclCommDestroy", Since: abi.V(2, 3, 0)},
	FnCommAbort:            {Name: "ncclCommAbort", Since: abi.V(2, 4, 0)},
	FnCommGetAsyncError:    {Name: "ncclCommGetAsyncError", Since: abi.V(2, 4, 0)},
	FnCommCount:            {Name: "ncclCommCount", Since: abi.V(2, 3, 0)},
	FnCommCuDevice:         {Name: "ncclCommCuDevice", Since: abi.V(2, 3, 0)},
	FnCommUserRank:         {Name: "ncclCommUserRank", Since: abi.V(2, 3, 0)},
	FnAllReduce:            {Name: "ncclAllReduce", Since: abi.V(2, 3, 0)},
	FnBroadcast:            {Name: "ncclBroadcast", Since: abi.V(2, 3, 0)},
	FnReduce:               {Name: "ncclReduce", Since: abi.V(2, 3, 0)},
	FnAllGather:            {Name: "ncclAllGather", Since: abi.V(2, 3, 0)},
	FnReduceScatter:        {Name: "ncclReduceScatter", Since: abi.V(2, 3, 0)},
	FnAlltoAll:             {Name: "ncclAlltoAll", Since: abi.V(2, 28, 0)},
	FnGather:               {Name: "ncclGather", Since: abi.V(2, 28, 0)},
	FnScatter:              {Name: "ncclScatter", Since: abi.V(2, 28, 0)},
	FnSend:                 {Name: "ncclSend", Since: abi.V(2, 7, 0)},
	FnRecv:                 {Name: "ncclRecv", Since: abi.V(2, 7, 0)},
	FnAlltoAllv:            {Name: "ncclAlltoAllv", Vendor: "VCCL"},
	FnGroupStart:           {Name: "ncclGroupStart", Since: abi.V(2, 3, 0)},
	FnGroupEnd:             {Name: "ncclGroupEnd", Since: abi.V(2, 3, 0)},
	FnRedOpCreatePreMulSum: {Name: "ncclRedOpCreatePreMulSum", Since: abi.V(2, 11, 0)},
	FnRedOpDestroy:         {Name: "ncclRedOpDestroy", Since: abi.V(2, 11, 0)},
	FnCommRegister:         {Name: "ncclCommRegister", Since: abi.V(2, 19, 0)},
	FnCommDeregister:       {Name: "ncclCommDeregister", Since: abi.V(2, 19, 0)},
	FnMemAlloc:             {Name: "ncclMemAlloc", Since: abi.V(2, 19, 0)},
	FnMemFree:              {Name: "ncclMemFree", Since: abi.V(2, 19, 0)},
	FnCommWindowRegister:   {Name: "ncclCommWindowRegister", Since: abi.V(2, 27, 0)},
	FnCommWindowDeregister: {Name: "ncclCommWindowDeregister", Since: abi.V(2, 27, 0)},
	FnCommShrink:           {Name: "ncclCommShrink", Since: abi.V(2, 27, 0)},
	FnCommRevoke:           {Name: "ncclCommRevoke", Since: abi.V(2, 28, 7)},
	FnCommGetUniqueID:      {Name: "ncclCommGetUniqueId", Since: abi.V(2, 29, 2)},
	FnCommGrow:             {Name: "ncclCommGrow", Since: abi.V(2, 29, 2)},
	FnPutSignal:            {Name: "ncclPutSignal", Since: abi.V(2, 29, 2)},
	FnSignal:               {Name: "ncclSignal", Since: abi.V(2, 29, 2)},
	FnWaitSignal:           {Name: "ncclWaitSignal", Since: abi.V(2, 29, 2)},
	FnWinGetUserPtr:        {Name: "ncclWinGetUserPtr", Since: abi.V(2, 29, 2)},
	FnGroupSimulateEnd:     {Name: "ncclGroupSimulateEnd", Since: abi.V(2, 22, 0)},
	FnCommQueryProperties:  {Name: "ncclCommQueryProperties", Since: abi.V(2, 29, 2)},
	FnCommSuspend:          {Name: "ncclCommSuspend", Since: abi.V(2, 29, 7)},
	FnCommResume:           {Name: "ncclCommResume", Since: abi.V(2, 29, 7)},
	FnCommMemStats:         {Name: "ncclCommMemStats", Since: abi.V(2, 29, 7)},
	// ncclParamHandle_t is a struct in 2.30.4 (functions take ncclParamHandle_t*)
	// and a pointer typedef from 2.30.7: one pointer either way, the same ABI.
	FnParamBind:                {Name: "ncclParamBind", Since: abi.V(2, 30, 4)},
	FnParamGetI8:               {Name: "ncclParamGetI8", Since: abi.V(2, 30, 4)},
	FnParamGetI16:              {Name: "ncclParamGetI16", Since: abi.V(2, 30, 4)},
	FnParamGetI32:              {Name: "ncclParamGetI32", Since: abi.V(2, 30, 4)},
	FnParamGetI64:              {Name: "ncclParamGetI64", Since: abi.V(2, 30, 4)},
	FnParamGetU8:               {Name: "ncclParamGetU8", Since: abi.V(2, 30, 4)},
	FnParamGetU16:              {Name: "ncclParamGetU16", Since: abi.V(2, 30, 4)},
	FnParamGetU32:              {Name: "ncclParamGetU32", Since: abi.V(2, 30, 4)},
	FnParamGetU64:              {Name: "ncclParamGetU64", Since: abi.V(2, 30, 4)},
	FnParamGetStr:              {Name: "ncclParamGetStr", Since: abi.V(2, 30, 4)},
	FnParamGetParameter:        {Name: "ncclParamGetParameter", Since: abi.V(2, 30, 4)},
	FnParamGetAllParameterKeys: {Name: "ncclParamGetAllParameterKeys", Since: abi.V(2, 30, 4)},
}
