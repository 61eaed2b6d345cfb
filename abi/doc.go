// Package abi is the C ABI of NCCL and of the parts of the CUDA runtime that
// gonccl calls, written in Go: result codes, data types, reduction ops, the
// unique id, version codes, the ncclConfig_t layout of each release, CUDA error
// codes, flags and structs. It has no behaviour beyond naming and encoding
// these values. Numbers come from nccl.h and driver_types.h for 64-bit Linux
// (amd64 and arm64, both little-endian, LP64), and tests pin every size and
// offset.
package abi
