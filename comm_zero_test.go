package nccl_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/gonccl/nccl"
)

// TestZeroComm: the zero Comm (and a nil *Comm) is not a communicator gonccl
// made. The rule: it is a closed one. Every method that returns an error
// returns one matching ErrClosed, none panics, Done is closed, the accessors
// give zero values. Before, AllReduce, Close and Split panicked, Abort
// returned nil and Done never closed.
func TestZeroComm(t *testing.T) {
	for _, c := range []*nccl.Comm{new(nccl.Comm), nil} {
		name := "the zero Comm"
		if c == nil {
			name = "a nil *Comm"
		}
		v := reflect.ValueOf(c)
		typ := v.Type()
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			args := make([]reflect.Value, m.Type.NumIn()-1)
			for j := range args {
				at := m.Type.In(j + 1)
				args[j] = reflect.Zero(at)
				if at == reflect.TypeFor[context.Context]() {
					args[j] = reflect.ValueOf(context.Background())
				}
			}
			var out []reflect.Value
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s: %s panicked: %v", name, m.Name, p)
					}
				}()
				out = v.Method(i).Call(args)
			}()
			for _, o := range out {
				if o.Type() != reflect.TypeFor[error]() {
					continue
				}
				err, _ := o.Interface().(error)
				if !errors.Is(err, nccl.ErrClosed) {
					t.Errorf("%s: %s returned %v, want an error matching ErrClosed", name, m.Name, err)
				}
			}
		}
		select {
		case <-c.Done():
		default:
			t.Errorf("%s: Done is not closed", name)
		}
		if c.Handle() != 0 || c.Size() != 0 || c.Library() != nil {
			t.Errorf("%s: accessors gave %#x, %d, %v", name, c.Handle(), c.Size(), c.Library())
		}
	}
	if _, err := nccl.PreMulSum(new(nccl.Comm), float32(1)); !errors.Is(err, nccl.ErrClosed) {
		t.Errorf("PreMulSum on the zero Comm: %v", err)
	}
}
