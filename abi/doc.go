// Package abi mirrors the C ABI of NCCL and the parts of the CUDA runtime gonccl
// uses: result codes, data types, reduction ops, the unique id, the
// ncclConfig_t layouts of each release, CUDA error codes and flags. It holds no
// behaviour: every size and offset here is pinned by a test against the headers'
// numbers.
package abi
