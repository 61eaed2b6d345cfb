//go:build gpu

package nccl

// With the gpu tag nothing points the search at the fakes: Open finds the real
// libraries.
const useFakesForExamples = false
