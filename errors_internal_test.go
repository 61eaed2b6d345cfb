package nccl

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gonccl/nccl/abi"
	"github.com/gonccl/nccl/internal/capi"
)

// TestErrorMethod: an error that knows the Go method called says it before
// the C function ("Close: ncclCommFinalize: ..."), and inMethod adds it
// without changing the error it was given, whose sentinel and type stay.
func TestErrorMethod(t *testing.T) {
	finalize := &Error{Op: "ncclCommFinalize", Code: abi.InvalidUsage, Msg: "busy"}
	closed := &ClosedError{Op: "ncclCommFinalize", What: "communicator"}
	cudaErr := &CUDAError{Op: "cudaStreamQuery", Code: abi.CudaErrorInvalidValue, Msg: "invalid argument"}
	deadline := fmt.Errorf("ncclCommFinalize: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		err    error
		want   string
		target error
	}{
		{inMethod("Close", finalize), "Close: ncclCommFinalize: " + abi.InvalidUsage.String() + ": busy", ErrInvalidUsage},
		{inMethod("Close", closed), "Close: ncclCommFinalize: use of a closed communicator", ErrClosed},
		{inMethod("Wait", cudaErr), "Wait: cudaStreamQuery: " + abi.CudaErrorInvalidValue.String() + ": invalid argument", ErrCUDA},
		{inMethod("Close", deadline), "Close: ncclCommFinalize: context deadline exceeded", context.DeadlineExceeded},
		// Already named: the zero Comm's error, and one wrapped twice.
		{inMethod("Close", zeroComm("Close")), zeroComm("Close").Error(), ErrClosed},
		{inMethod("Close", inMethod("Close", deadline)), "Close: ncclCommFinalize: context deadline exceeded", context.DeadlineExceeded},
		{inMethod("AllReduce", inProgress[capi.FnAllReduce]), "AllReduce: ncclAllReduce: " + abi.InProgress.String() + ": operation in progress", ErrInProgress},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
		if !errors.Is(tc.err, tc.target) {
			t.Errorf("%q does not match %v", tc.err, tc.target)
		}
	}
	if finalize.Method != "" || closed.Method != "" || cudaErr.Method != "" || inProgress[capi.FnAllReduce].Method != "" {
		t.Error("inMethod changed the error it was given")
	}
	if _, ok := inMethod("Close", finalize).(*Error); !ok {
		t.Error("inMethod changed an *Error's type")
	}
	if inMethod("Close", nil) != nil {
		t.Error("inMethod(nil) is not nil")
	}
	// Method equal to Op is said once.
	if got := (&Error{Op: "Close", Code: abi.InvalidUsage, Method: "Close"}).Error(); got != "Close: "+abi.InvalidUsage.String() {
		t.Errorf("Method equal to Op: %q", got)
	}
}

// TestErrorHelpersClass: the errors of nil receivers and nil contexts match
// the sentinels the package doc promises.
func TestErrorHelpersClass(t *testing.T) {
	for _, tc := range []struct {
		err    error
		target error
	}{
		{nilLibrary("Group"), ErrClosed},
		{nilCUDA("Alloc"), ErrClosed},
		{nilContext("InitRank"), ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.target) {
			t.Errorf("%q does not match %v", tc.err, tc.target)
		}
	}
}
