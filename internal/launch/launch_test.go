package launch

import (
	"reflect"
	"testing"
)

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want Job
	}{
		{map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, Job{3, 8, 1, "torchrun"}},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, Job{2, 4, 0, "mpirun"}},
		{map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"}, Job{5, 6, 1, "srun"}},
		{map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, Job{1, 2, 1, "srun"}}, // no local id: the rank
		{map[string]string{}, Job{0, 1, 0, "none"}},
	} {
		for _, k := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
			"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"} {
			t.Setenv(k, c.env[k])
		}
		got, err := Detect()
		if err != nil || got != c.want {
			t.Errorf("%v: %+v, %v; want %+v", c.env, got, err, c.want)
		}
	}
	t.Setenv("RANK", "4")
	t.Setenv("WORLD_SIZE", "4")
	if _, err := Detect(); err == nil {
		t.Error("rank 4 of 4 accepted")
	}
	t.Setenv("WORLD_SIZE", "x")
	if _, err := Detect(); err == nil {
		t.Error("WORLD_SIZE=x accepted")
	}
}

func TestStripNP(t *testing.T) {
	got := stripNP([]string{"-np", "2", "-n", "5", "-np=4", "--np", "3", "-idfile", "/x"})
	if want := []string{"-n", "5", "-idfile", "/x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}
