package launch

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseNodelist(t *testing.T) {
	for in, want := range map[string][]string{
		"node01":                     {"node01"},
		"node[01-04,07],gpu-a[1-2]":  {"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"},
		"n[8-10]":                    {"n8", "n9", "n10"},
		"n[08-10]":                   {"n08", "n09", "n10"},
		"n[098-100]":                 {"n098", "n099", "n100"},
		"a,b[2],c":                   {"a", "b2", "c"},
		"rack[1-2]-n[1-2]":           {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"},
		"n[1-2]-ib":                  {"n1-ib", "n2-ib"},
		"[1-2]":                      {"1", "2"},
		"gpu-a1.cluster,gpu-b[3,1]x": {"gpu-a1.cluster", "gpu-b3x", "gpu-b1x"},
		"n[0-0]":                     {"n0"},
	} {
		got, err := ParseNodelist(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"":                         "no names",
		"a,,b":                     "an empty name",
		"a,":                       "an empty name",
		",a":                       "an empty name",
		"n[1-":                     "a '[' without ']'",
		"n1]":                      "a ']' without '['",
		"n[[1]]":                   "a bracket inside a bracket",
		"n[]":                      "an empty bracket",
		"n[a-b]":                   "not digits",
		"n[1-]":                    "not digits",
		"n[-1]":                    "not digits",
		"n[5-2]":                   "a reversed range",
		"n[1,,2]":                  "not digits",
		"n[0-99999999]":            "more than 1048576 names",
		"a b":                      "a space",
		"n[1-1000000000000000000]": "not digits",
	} {
		_, err := ParseNodelist(in)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error saying %q", in, err, msg)
		}
	}
	// Many brackets multiply: bounded too.
	if _, err := ParseNodelist("a[0-1023]b[0-1023]c[0-1]"); err == nil {
		t.Error("2^21 names accepted")
	}
}

func TestTasksOnNode(t *testing.T) {
	for _, c := range []struct {
		list string
		node int
		want int
		err  bool
	}{
		{"2(x3),1", 0, 2, false}, {"2(x3),1", 2, 2, false}, {"2(x3),1", 3, 1, false}, {"2(x3),1", 4, 0, true},
		{"4", 0, 4, false}, {"4,2", 1, 2, false}, {"x", 0, 0, true}, {"2(x", 0, 0, true}, {"2(x0)", 0, 0, true},
		{"1", -1, 0, true},
	} {
		got, err := tasksOnNode(c.list, c.node)
		if got != c.want || (err != nil) != c.err {
			t.Errorf("%q node %d: %d, %v", c.list, c.node, got, err)
		}
	}
}

// FuzzParseNodelist: any input parses or fails cleanly; what parses is a
// bounded list of non-empty names with no separators left, and a list of
// plain names parses to itself.
func FuzzParseNodelist(f *testing.F) {
	for _, s := range []string{"node[01-04,07],gpu-a[1-2]", "a", "n[8-10]", "r[1-2]n[3-4]", "n[", "a,,b", "n[9-1]", "x[0-99999999999]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseNodelist(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "launch: node list ") {
				t.Fatalf("error %v", err)
			}
			return
		}
		if len(got) == 0 || len(got) > maxNodes {
			t.Fatalf("%d names", len(got))
		}
		for _, n := range got {
			if n == "" || strings.ContainsAny(n, "[],") {
				t.Fatalf("name %q from %q", n, in)
			}
		}
		if !strings.ContainsAny(in, "[]") && !reflect.DeepEqual(got, strings.Split(in, ",")) {
			t.Fatalf("%q: %q", in, got)
		}
	})
}

func ExampleParseNodelist() {
	nodes, err := ParseNodelist("node[01-03,07],gpu-a[1-2]")
	fmt.Println(nodes, err)
	// Output: [node01 node02 node03 node07 gpu-a1 gpu-a2] <nil>
}
