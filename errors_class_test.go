package nccl_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
)

// The errors package doc promises that every error gonccl returns matches a
// sentinel of the package (or wraps ctx.Err(), or is the caller's own). These
// tests hold the calls that broke the promise to it: errors made with
// fmt.Errorf and no sentinel, and nil receivers and nil contexts that
// panicked instead of returning an error.

// TestErrorClassBadInputs: bad inputs to the calls that returned an untyped
// error, or none of the promised sentinel.
func TestErrorClassBadInputs(t *testing.T) {
	l := open(t, "default")
	var id nccl.UniqueID
	var nilID *nccl.UniqueID
	var zero nccl.Buffer
	host := make([]float32, 4)
	s := l.CUDA().DefaultStream(0)
	for _, tc := range []struct {
		what   string
		err    error
		target error
		says   string // what the text must hold, if anything
	}{
		{"UnmarshalBinary of 5 bytes", id.UnmarshalBinary(make([]byte, 5)), nccl.ErrInvalidArgument, "5 bytes, want 128"},
		{"UnmarshalBinary into a nil *UniqueID", nilID.UnmarshalBinary(make([]byte, nccl.UniqueIDBytes)), nccl.ErrInvalidArgument, "nil *UniqueID"},
		{"UnmarshalText into a nil *UniqueID", nilID.UnmarshalText([]byte(id.String())), nccl.ErrInvalidArgument, "nil *UniqueID"},
		{"Open with an AlltoAllv ABI of 12 arguments", openErr(nccl.WithAlltoAllvABI(12)), nccl.ErrInvalidArgument, "want 10 or 11"},
		{"Open with a relative WithLibrary", openErr(nccl.WithLibrary("lib/libnccl.so.2")), nccl.ErrInvalidArgument, "is not an absolute path"},
		{"CopyIn into the zero Buffer", nccl.CopyIn(zero, host), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"CopyOut of the zero Buffer", nccl.CopyOut(host, zero), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"CopyIn of no elements into the zero Buffer", nccl.CopyIn[int8](zero, nil), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"CopyInAsync into the zero Buffer", nccl.CopyInAsync(zero, host, s), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"CopyOutAsync of the zero Buffer", nccl.CopyOutAsync(host, zero, s), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"CopyAsync into the zero Buffer", nccl.CopyAsync(zero, zero, s), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"WriteBytes into the zero Buffer", zero.WriteBytes([]byte{1}), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"ReadBytes of the zero Buffer", zero.ReadBytes(make([]byte, 1)), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"Memset of the zero Buffer", zero.Memset(0), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"Free of the zero Buffer", zero.Free(), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"FreeAsync of the zero Buffer", zero.FreeAsync(s), nccl.ErrInvalidArgument, "the zero Buffer (not allocated"},
		{"Group(nil)", l.Group(nil), nccl.ErrInvalidArgument, "nil function"},
		{"SimulateGroup(nil)", simulateErr(l, nil), nccl.ErrInvalidArgument, "nil function"},
	} {
		if !errors.Is(tc.err, tc.target) {
			t.Errorf("%s: %v, want an error matching %v", tc.what, tc.err, tc.target)
			continue
		}
		if !strings.Contains(tc.err.Error(), tc.says) {
			t.Errorf("%s: %q, want it to say %q", tc.what, tc.err, tc.says)
		}
	}
	// A library still works after a refused Group.
	if err := l.Group(func() error { return nil }); err != nil {
		t.Errorf("Group after Group(nil): %v", err)
	}
}

func openErr(opts ...nccl.Option) error {
	l, err := nccl.Open(opts...)
	if err == nil {
		l.Close()
	}
	return err
}

func simulateErr(l *nccl.Library, fn func() error) error {
	_, err := l.SimulateGroup(fn)
	return err
}

// TestErrorClassLoaderEnvironment: a relative path in a variable the search
// reads was refused with an error matching no sentinel.
func TestErrorClassLoaderEnvironment(t *testing.T) {
	t.Setenv("GONCCL_NCCL_LIB", "relative/libnccl.so.2")
	if err := openErr(); !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "GONCCL_NCCL_LIB") {
		t.Errorf("GONCCL_NCCL_LIB relative: %v, want an error matching ErrInvalidArgument naming the variable", err)
	}
	t.Setenv("GONCCL_NCCL_LIB", "")
	t.Setenv("NUMBA_NCCLLIB", "relative/dir") // strict: set, it must yield the library
	if err := openErr(); !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "NUMBA_NCCLLIB") {
		t.Errorf("NUMBA_NCCLLIB relative: %v, want an error matching ErrInvalidArgument naming the variable", err)
	}
	t.Setenv("NUMBA_NCCLLIB", "")
	t.Setenv("GONCCL_ALLTOALLV_ABI", "eleven")
	if err := openErr(); !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), `GONCCL_ALLTOALLV_ABI="eleven"`) {
		t.Errorf("GONCCL_ALLTOALLV_ABI=eleven: %v, want an error matching ErrInvalidArgument quoting the value", err)
	}
}

// callCatching calls m with args and returns its results, or the panic.
func callCatching(m reflect.Value, args []reflect.Value) (out []reflect.Value, panicked any) {
	defer func() { panicked = recover() }()
	return m.Call(args), nil
}

// errorOf is the error among results, nil if none or nil.
func errorOf(out []reflect.Value) (error, bool) {
	for _, o := range out {
		if o.Type() == reflect.TypeFor[error]() {
			err, _ := o.Interface().(error)
			return err, true
		}
	}
	return nil, false
}

// judge records the outcome of one call that must return an error matching
// target and not panic.
func judge(t *testing.T, name string, panicked any, err error, target error) {
	t.Helper()
	ok := panicked == nil && errors.Is(err, target)
	switch {
	case ok:
	case panicked != nil:
		t.Errorf("%s panicked: %v", name, panicked)
	default:
		t.Errorf("%s returned %v, want an error matching %v", name, err, target)
	}
}

// TestNilLibraryAndCUDA: every method of a nil *Library and a nil *CUDA
// (what Library.CUDA returns WithoutCUDARuntime) returns an error matching
// ErrClosed, as os.File's methods return os.ErrInvalid for a nil *File;
// none panics, and the accessors give zero values. Wrap, WrapStream and
// DefaultStream call no CUDA function: they still describe memory and
// streams for NCCL's operations.
func TestNilLibraryAndCUDA(t *testing.T) {
	ctx := context.Background()
	// Arguments that would be refused before the receiver is looked at.
	valid := map[string][]any{
		"InitRank":         {ctx, 0, nccl.UniqueID{}, 1, 0, (*nccl.Config)(nil)},
		"InitRankScalable": {ctx, 0, []nccl.UniqueID{{}}, 1, 0, (*nccl.Config)(nil)},
		"InitAll":          {ctx, []int{0}, (*nccl.Config)(nil)},
		"GrowRank":         {ctx, 0, nccl.UniqueID{}, 2, 1, (*nccl.Config)(nil)},
		"Group":            {func() error { return nil }},
		"SimulateGroup":    {func() error { return nil }},
		"OnDevice":         {0, func() error { return nil }},
		"Capture":          {nccl.Stream{}, func() error { return nil }},
	}
	describes := map[string]bool{"*CUDA.Wrap": true, "*CUDA.WrapStream": true, "*CUDA.DefaultStream": true}
	for _, recv := range []any{(*nccl.Library)(nil), (*nccl.CUDA)(nil)} {
		v := reflect.ValueOf(recv)
		typ := v.Type()
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			name := "*" + typ.Elem().Name() + "." + m.Name
			args := make([]reflect.Value, m.Type.NumIn()-1)
			for j := range args {
				at := m.Type.In(j + 1)
				args[j] = reflect.Zero(at)
				if at == reflect.TypeFor[context.Context]() {
					args[j] = reflect.ValueOf(ctx)
				}
				if a, ok := valid[m.Name]; ok {
					args[j] = reflect.ValueOf(a[j]).Convert(at)
				}
			}
			if m.Type.IsVariadic() {
				last := m.Type.In(m.Type.NumIn() - 1)
				args[len(args)-1] = reflect.MakeSlice(last, 1, 1) // a device 0, ...
				if last == reflect.TypeFor[[]string]() {
					args[len(args)-1] = reflect.ValueOf([]string{"ncclAllReduce"})
				}
				out, p := func() (out []reflect.Value, panicked any) {
					defer func() { panicked = recover() }()
					return v.Method(i).CallSlice(args), nil
				}()
				err, _ := errorOf(out)
				judge(t, name, p, err, nccl.ErrClosed)
				continue
			}
			out, p := callCatching(v.Method(i), args)
			err, hasErr := errorOf(out)
			switch {
			case describes[name]:
				if p != nil || err != nil {
					t.Errorf("%s: panic %v, error %v; want it to describe without the runtime", name, p, err)
				}
			case hasErr || m.Type.NumOut() > 0 && m.Type.Out(m.Type.NumOut()-1) == reflect.TypeFor[error]():
				judge(t, name, p, err, nccl.ErrClosed)
			case p != nil:
				t.Errorf("%s panicked: %v", name, p)
			}
		}
	}
	var l *nccl.Library
	if l.Version() != (nccl.Version{}) || l.CUDA() != nil || l.AlltoAllvABI() != 0 || l.Has("ncclAllReduce") ||
		l.Features() != nil || l.SupportsType(nccl.Float32) || l.LastError() != "" {
		t.Errorf("a nil *Library's accessors: %v %v %d %v %v %v %q", l.Version(), l.CUDA(), l.AlltoAllvABI(),
			l.Has("ncclAllReduce"), l.Features(), l.SupportsType(nccl.Float32), l.LastError())
	}
	var cu *nccl.CUDA
	if cu.HasGraphs() || cu.ErrorName(nccl.CUDAErrorCode(1)) == "" {
		t.Errorf("a nil *CUDA: HasGraphs %v, ErrorName %q", cu.HasGraphs(), cu.ErrorName(nccl.CUDAErrorCode(1)))
	}
	// The generic functions taking a runtime.
	if _, err := nccl.MallocHostOf[float32](nil, 4); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("MallocHostOf on a nil *CUDA: %v", err)
	}
	if err := nccl.FreeHostOf(nil, make([]float32, 4)); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("FreeHostOf on a nil *CUDA: %v", err)
	}
	// What a nil *CUDA describes reaches no runtime: its copies are refused.
	b, err := cu.Wrap(0, 0x10000, nccl.Float32, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := nccl.CopyIn(b, make([]float32, 4)); !errors.Is(err, nccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil *CUDA") {
		t.Errorf("CopyIn into a buffer a nil *CUDA wrapped: %v", err)
	}
	ws, err := cu.WrapStream(0, 0x1234)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Synchronize(); !errors.Is(err, nccl.ErrInvalidArgument) {
		t.Errorf("Synchronize of a stream a nil *CUDA wrapped: %v", err)
	}
}

// TestNilContext: a nil context.Context (which the context package forbids)
// is refused with an error matching ErrInvalidArgument by every call that
// takes one, before anything reaches NCCL, and the communicator stays usable.
func TestNilContext(t *testing.T) {
	l := open(t, "default")
	ctx := context.Background()
	comms, err := l.InitAll(ctx, []int{0}, nil) // one rank: nothing waits for a peer
	if err != nil {
		t.Fatal(err)
	}
	c := comms[0]
	defer c.Close(ctx)
	s := l.CUDA().DefaultStream(0)
	var nilCtx context.Context
	id := nccl.UniqueID{}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Revoke", func() error { return c.Revoke(nilCtx) }},
		{"Shrink", func() error { _, err := c.Shrink(nilCtx, []int{1}, nil, nccl.ShrinkDefault); return err }},
		{"Grow", func() error { _, err := c.Grow(nilCtx, 2, &id, nil); return err }},
		{"GrowRank", func() error { _, err := l.GrowRank(nilCtx, 0, id, 2, 1, nil); return err }},
		{"InitRank", func() error { _, err := l.InitRank(nilCtx, 0, id, 1, 0, nil); return err }},
		{"InitRankScalable", func() error {
			_, err := l.InitRankScalable(nilCtx, 0, []nccl.UniqueID{id}, 1, 0, nil)
			return err
		}},
		{"InitAll", func() error { _, err := l.InitAll(nilCtx, []int{0}, nil); return err }},
		{"Split", func() error { _, err := c.Split(nilCtx, 0, 0, nil); return err }},
		{"Wait", func() error { return c.Wait(nilCtx, s) }},
		{"Close", func() error { return c.Close(nilCtx) }}, // last: it may close c
	} {
		out, p := callCatching(reflect.ValueOf(tc.call), nil)
		err, _ := errorOf(out)
		judge(t, "ctx "+tc.name, p, err, nccl.ErrInvalidArgument)
		if err != nil && errors.Is(err, nccl.ErrInvalidArgument) && !strings.Contains(err.Error(), "nil context.Context") {
			t.Errorf("%s: %q, want it to name the nil context.Context", tc.name, err)
		}
	}
	if err := c.AsyncError(); err != nil {
		t.Errorf("the communicator after the refusals: %v", err)
	}
}
