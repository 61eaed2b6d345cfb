package nccl_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
)

func TestParams(t *testing.T) {
	t.Setenv("NCCL_BUFFSIZE", "8388608")
	l := open(t, "v230")
	h, err := l.BindParam("NCCL_BUFFSIZE")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := nccl.ParamValue[int64](h); err != nil || v != 8388608 {
		t.Errorf("NCCL_BUFFSIZE = %d, %v; want 8388608 from the environment", v, err)
	}
	if _, err := nccl.ParamValue[int32](h); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("NCCL_BUFFSIZE read as int32: %v, want ErrInvalidArgument", err)
	}
	if _, err := h.Str(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("NCCL_BUFFSIZE read as a string: %v, want ErrInvalidArgument", err)
	}
	n, err := l.BindParam("NCCL_NTHREADS")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := nccl.ParamValue[int32](n); err != nil || v != 512 {
		t.Errorf("NCCL_NTHREADS = %d, %v; want the default 512", v, err)
	}
	s, err := l.BindParam("NCCL_P2P_LEVEL")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Str(); err != nil || v != "SYS" || s.Key() != "NCCL_P2P_LEVEL" {
		t.Errorf("NCCL_P2P_LEVEL = %q, %v", v, err)
	}
	if v, err := l.Param("NCCL_BUFFSIZE"); err != nil || v != "8388608" {
		t.Errorf("Param(NCCL_BUFFSIZE) = %q, %v", v, err)
	}
	if _, err := l.BindParam("NCCL_NO_SUCH_THING"); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("an unknown key: %v, want ErrInvalidArgument", err)
	}
	if _, err := nccl.ParamValue[int64](nccl.ParamHandle{}); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("the zero ParamHandle: %v, want ErrInvalidArgument", err)
	}
	keys, err := l.ParamKeys()
	if err != nil || !slices.Contains(keys, "NCCL_BUFFSIZE") || len(keys) != 4 {
		t.Errorf("ParamKeys = %q, %v", keys, err)
	}

	old := open(t, "default")
	if _, err := old.BindParam("NCCL_BUFFSIZE"); !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "requires >= 2.30.4)") {
		t.Errorf("BindParam on 2.28.3: %v", err)
	}
	if _, err := old.ParamKeys(); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("ParamKeys on 2.28.3: %v", err)
	}
}
