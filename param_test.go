package nccl_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
)

// TestParams: the registry of NCCL 2.30.7 (the parameters defined with
// DEFINE_NCCL_PARAM; NCCL_BUFFSIZE and the other NCCL_PARAM ones are not in
// it), each read through its own type, and rendered as NCCL's parsers do.
func TestParams(t *testing.T) {
	t.Setenv("NCCL_DEBUG_SUBSYS", "coll,P2P")
	t.Setenv("NCCL_DEBUG", "warn")
	l := open(t, "v230")
	h, err := l.BindParam("NCCL_DEBUG_SUBSYS")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := nccl.ParamValue[uint64](h); err != nil || v != 0x6 {
		t.Errorf("NCCL_DEBUG_SUBSYS = %#x, %v; want COLL|P2P = 0x6 from the environment", v, err)
	}
	if _, err := nccl.ParamValue[int32](h); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("NCCL_DEBUG_SUBSYS read as int32: %v, want ErrInvalidArgument", err)
	}
	if _, err := h.Str(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("NCCL_DEBUG_SUBSYS read as a string: %v, want ErrInvalidArgument", err)
	}
	for key, want := range map[string]string{
		"NCCL_DEBUG_SUBSYS":           "COLL,P2P",
		"NCCL_DEBUG":                  "WARN",
		"NCCL_DEBUG_TIMESTAMP_LEVELS": "WARN",
		"NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T] ",
		"NCCL_DEBUG_FILE":             "",
		"NCCL_SET_THREAD_NAME":        "FALSE",
	} {
		if v, err := l.Param(key); err != nil || v != want {
			t.Errorf("Param(%s) = %q, %v; want %q", key, v, err, want)
		}
	}
	n, err := l.BindParam("NCCL_DEBUG_TIMESTAMP_LEVELS")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := nccl.ParamValue[uint32](n); err != nil || v != 1<<2 {
		t.Errorf("NCCL_DEBUG_TIMESTAMP_LEVELS = %d, %v; want the default 1<<WARN", v, err)
	}
	s, err := l.BindParam("NCCL_DEBUG_TIMESTAMP_FORMAT")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Str(); err != nil || v != "[%F %T] " || s.Key() != "NCCL_DEBUG_TIMESTAMP_FORMAT" {
		t.Errorf("NCCL_DEBUG_TIMESTAMP_FORMAT = %q, %v", v, err)
	}
	b, err := l.BindParam("NCCL_SET_THREAD_NAME")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nccl.ParamValue[uint8](b); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("a boolean read as uint8: %v, want ErrInvalidArgument", err)
	}
	for _, key := range []string{"NCCL_NO_SUCH_THING", "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE"} {
		if _, err := l.BindParam(key); !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("BindParam(%s), not in the registry: %v, want ErrInvalidArgument", key, err)
		}
		if _, err := l.Param(key); !errors.Is(err, nccl.ErrInvalidArgument) {
			t.Errorf("Param(%s), not in the registry: %v, want ErrInvalidArgument", key, err)
		}
	}
	if _, err := nccl.ParamValue[int64](nccl.ParamHandle{}); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("the zero ParamHandle: %v, want ErrInvalidArgument", err)
	}
	keys, err := l.ParamKeys()
	if err != nil || !slices.Contains(keys, "NCCL_DEBUG_SUBSYS") || slices.Contains(keys, "NCCL_WARN_ENABLE_DEBUG_INFO") || len(keys) != 6 {
		t.Errorf("ParamKeys = %q, %v; want the 6 published", keys, err)
	}
	t.Setenv("NCCL_PARAM_DUMP_ALL", "true")
	if keys, err := l.ParamKeys(); err != nil || !slices.Contains(keys, "NCCL_WARN_ENABLE_DEBUG_INFO") || len(keys) != 7 {
		t.Errorf("ParamKeys with NCCL_PARAM_DUMP_ALL = %q, %v; want all 7", keys, err)
	}

	old := open(t, "default")
	if _, err := old.BindParam("NCCL_DEBUG_SUBSYS"); !errors.Is(err, nccl.ErrNotSupported) || !strings.HasSuffix(err.Error(), "requires >= 2.30.4)") {
		t.Errorf("BindParam on 2.28.3: %v", err)
	}
	if _, err := old.ParamKeys(); !errors.Is(err, nccl.ErrNotSupported) {
		t.Errorf("ParamKeys on 2.28.3: %v", err)
	}
}
