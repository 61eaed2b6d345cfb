package load

import (
	"errors"
	"testing"
)

// TestErrorClass: the look for a library among those mapped that finds none
// is ErrNotFound; a relative path is ErrInvalidArgument.
func TestErrorClass(t *testing.T) {
	for _, tc := range []struct {
		err    error
		target error
	}{
		{errNotMapped, ErrNotFound},
		{relativePath("lib"), ErrInvalidArgument},
	} {
		if !errors.Is(tc.err, tc.target) {
			t.Errorf("%q does not match %v", tc.err, tc.target)
		}
	}
}
