//go:build !gpu

package nccl

// Without the gpu tag the Example functions run against the fake libraries.
const useFakesForExamples = true
