package launch

import "fmt"

// DeviceError is a local rank that has no GPU to run on.
type DeviceError struct {
	LocalRank int
	Visible   int // the number of GPUs the process sees
}

func (e *DeviceError) Error() string {
	if e.Visible <= 0 {
		return fmt.Sprintf("launch: local rank %d: no GPU is visible", e.LocalRank)
	}
	return fmt.Sprintf("launch: local rank %d has no GPU of its own: %d visible (devices 0-%d); run no more ranks on this node than GPUs, "+
		"or let ranks share GPUs with NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.30 and later)",
		e.LocalRank, e.Visible, e.Visible-1)
}

// Device is the CUDA device of this process among visible ones (the CUDA
// runtime's DeviceCount): its local rank. A local rank beyond the visible GPUs
// is a *DeviceError, unless SharedGPUs lets NCCL put several ranks on one GPU:
// then the local ranks go round the visible GPUs (local rank modulo visible).
// NCCL before 2.30 refuses ranks that share a GPU at communicator creation
// ("Duplicate GPU detected"), and NCCL documents sharing as experimental: at
// most two ranks a GPU with its default channel counts.
func (j Job) Device(visible int) (int, error) {
	switch {
	case visible <= 0 || (j.LocalRank >= visible && !j.SharedGPUs):
		return 0, &DeviceError{LocalRank: j.LocalRank, Visible: visible}
	case j.LocalRank >= visible:
		return j.LocalRank % visible, nil
	}
	return j.LocalRank, nil
}
