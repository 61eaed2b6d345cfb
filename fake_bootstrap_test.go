package nccl

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gonccl/nccl/internal/fakes"
)

// The fake NCCL's ids carry the address NCCL's bootstrap would listen on
// (ncclFindInterfaces): NCCL_SOCKET_IFNAME's interface where set, else ib*,
// else the first interface that is up and neither docker* nor lo*, else
// docker*, else the loopback,
// so that ranks on other hosts can dial it (scripts/test-netns-nodes.sh runs
// ranks on two). Each case is a fresh process: a process has one rendezvous.
func TestFakeBootstrapAddress(t *testing.T) {
	want := "127.0.0.1"
	ifs, _ := net.Interfaces()
	for _, class := range []func(string) bool{
		func(n string) bool { return strings.HasPrefix(n, "ib") },
		func(n string) bool { return !strings.HasPrefix(n, "docker") && !strings.HasPrefix(n, "lo") },
		func(n string) bool { return strings.HasPrefix(n, "docker") },
	} {
		for _, i := range ifs {
			if want != "127.0.0.1" || i.Flags&net.FlagUp == 0 || !class(i.Name) {
				continue
			}
			addrs, _ := i.Addrs()
			for _, a := range addrs {
				if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && want == "127.0.0.1" {
					want = ip.IP.String()
				}
			}
		}
	}
	for _, c := range []struct{ ifname, want string }{
		{"", want},
		{"lo", "127.0.0.1"},
		{"=gonccl-none0", "error"},
	} {
		out, err := fakes.RunChild(t, 0, "bootstrap-address", "NCCL_SOCKET_IFNAME="+c.ifname)
		got := strings.TrimSpace(out)
		t.Logf("NCCL_SOCKET_IFNAME=%q: %s", c.ifname, got)
		if c.want == "error" {
			if err == nil || !strings.Contains(got, "ncclGetUniqueId") {
				t.Errorf("NCCL_SOCKET_IFNAME=%q: %v, %q; want GetUniqueID to fail", c.ifname, err, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("NCCL_SOCKET_IFNAME=%q: the id carries %q (%v), want %s", c.ifname, got, err, c.want)
		}
	}
}

func init() {
	// bootstrap-address prints the IPv4 address in the fake's id (its layout:
	// fakenccl/net.c, fill_id: the family at byte 13, the address from 16).
	children["bootstrap-address"] = func() error {
		dir := os.Getenv("GONCCL_FAKE_DIR")
		l, err := Open(WithLibrary(filepath.Join(dir, "default")), WithCUDARuntime(filepath.Join(dir, "cudart")))
		if err != nil {
			return err
		}
		id, err := l.GetUniqueID()
		if err != nil {
			return err
		}
		if string(id.Internal[:4]) != "FKID" || id.Internal[13] != 4 {
			return errors.New("not an IPv4 id of the fake")
		}
		os.Stdout.WriteString(net.IP(id.Internal[16:20]).String() + "\n")
		return nil
	}
}
