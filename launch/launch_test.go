package launch

import (
	"errors"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gonccl/nccl"
	"github.com/gonccl/nccl/internal/fakes"
)

func TestMain(m *testing.M) {
	if os.Getenv("GONCCL_LAUNCH_TEST_RANK") != "" { // a rank of TestTorchrunFlow
		os.Exit(rankMain())
	}
	if mode := os.Getenv("GONCCL_LAUNCH_TEST_SELF"); mode != "" { // a rank of TestSelfLaunch
		os.Exit(selfRankMain(mode))
	}
	os.Exit(m.Run())
}

func openFake(t *testing.T) *nccl.Library {
	t.Helper()
	lib, err := nccl.Open(nccl.WithLibrary(fakes.NCCL(t, "default")), nccl.WithCUDARuntime(fakes.CUDART(t)))
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

func TestStripNP(t *testing.T) {
	got := stripNP([]string{"-np", "2", "-n", "5", "-np=4", "--np", "3", "-idfile", "/x"})
	if want := []string{"-n", "5", "-idfile", "/x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestFlags: Register's flags land in Flags; -size places the process,
// -rank alone is refused, errors name the flags; Share reads -idvia.
func TestFlags(t *testing.T) {
	parse := func(args ...string) *Flags {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f := Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := parse("-np", "3", "-idfile", "/tmp/id", "-idvia", "store", "-store", "h:1")
	if f.NP != 3 || f.IDFile != "/tmp/id" {
		t.Errorf("%+v", *f)
	}
	if s := f.Share(); s != (Share{Via: ViaStore, File: "/tmp/id", Store: "h:1"}) {
		t.Errorf("Share: %+v", s)
	}
	if s := parse("-idvia", "carrier-pigeon").Share(); s.Via == ViaAuto {
		t.Error("an unknown -idvia became auto")
	} else if _, err := Choose(Job{Size: 2}, s); err == nil || !strings.Contains(err.Error(), `"carrier-pigeon"`) {
		t.Errorf("an unknown -idvia: %v, want an error naming it", err)
	}
	j, err := parse("-size", "4", "-rank", "3").Detect()
	if err != nil || j.Rank != 3 || j.Size != 4 || j.LocalRank != 3 || j.Launcher != Explicit {
		t.Errorf("-size 4 -rank 3: %+v, %v", j, err)
	}
	j, err = parse("-size", "4", "-rank", "3", "-local-rank", "1").Detect()
	if err != nil || j.LocalRank != 1 {
		t.Errorf("-local-rank 1: %+v, %v", j, err)
	}
	var ee *EnvError
	if _, err := parse("-np", "-2").Detect(); !errors.As(err, &ee) || ee.Var != "-np" {
		t.Errorf("-np -2: %v, want an *EnvError naming -np (it ran a job of one)", err)
	}
	if _, err := parse("-rank", "1").Detect(); err == nil {
		t.Error("-rank without -size was taken")
	}
	if _, err := parse("-size", "2", "-rank", "2").Detect(); err == nil || err.Error() != `launch: options: -rank="2": not below -size=2` {
		t.Errorf("-rank 2 of 2: %v", err)
	}
}

func TestVia(t *testing.T) {
	for i, n := range viaNames {
		if v, err := ParseVia(n); err != nil || v != Via(i) || v.String() != n {
			t.Errorf("%s: %v, %v", n, v, err)
		}
	}
	if _, err := ParseVia("File"); err == nil {
		t.Error("ParseVia(File) taken")
	}
}
