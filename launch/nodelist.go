package launch

import (
	"fmt"
	"strconv"
	"strings"
)

// maxNodes bounds what ParseNodelist expands: a list of more nodes than any
// machine has is a mistake, not a job.
const maxNodes = 1 << 20

// ParseNodelist expands a Slurm node list in its compressed form, as
// SLURM_JOB_NODELIST and SLURM_STEP_NODELIST hold it:
//
//	node[01-04,07],gpu-a[1-2],login
//	→ node01 node02 node03 node04 node07 gpu-a1 gpu-a2 login
//
// Commas outside brackets separate names; a bracket holds numbers and ranges
// lo-hi separated by commas, each padded with zeros to the width of its lower
// bound, as Slurm writes them (node[08-10] is node08 node09 node10). A name may
// hold several brackets (rack[1-2]-n[1-2]); the last varies fastest. The order
// is the list's, which for a job step is the order in which srun numbers its
// nodes (SLURM_NODEID). Malformed lists, reversed ranges and lists of more
// than 2^20 names are errors.
func ParseNodelist(list string) ([]string, error) {
	var out []string
	rest := list
	for rest != "" {
		// The next name ends at the first comma outside brackets.
		depth, end := 0, len(rest)
	scan:
		for i := 0; i < len(rest); i++ {
			switch rest[i] {
			case '[':
				if depth++; depth > 1 {
					return nil, nodelistError(list, "a bracket inside a bracket")
				}
			case ']':
				if depth--; depth < 0 {
					return nil, nodelistError(list, "a ']' without '['")
				}
			case ',':
				if depth == 0 {
					end = i
					break scan
				}
			}
		}
		if depth != 0 {
			return nil, nodelistError(list, "a '[' without ']'")
		}
		name := rest[:end]
		if name == "" {
			return nil, nodelistError(list, "an empty name")
		}
		var err error
		if out, err = expandName(out, name, list); err != nil {
			return nil, err
		}
		if end == len(rest) {
			break
		}
		rest = rest[end+1:]
		if rest == "" {
			return nil, nodelistError(list, "an empty name")
		}
	}
	if len(out) == 0 {
		return nil, nodelistError(list, "no names")
	}
	return out, nil
}

// expandName appends the names one entry of a node list stands for: the
// cartesian product of its brackets.
func expandName(out []string, name, list string) ([]string, error) {
	open := strings.IndexByte(name, '[')
	if open < 0 {
		if strings.ContainsAny(name, " \t\n]") {
			return nil, nodelistError(list, "a space or stray bracket in "+quote(name))
		}
		return append(out, name), nil
	}
	closing := strings.IndexByte(name[open:], ']') + open
	prefix, inner, suffix := name[:open], name[open+1:closing], name[closing+1:]
	if strings.ContainsAny(prefix, " \t\n") {
		return nil, nodelistError(list, "a space in "+quote(name))
	}
	nums, err := expandRanges(inner, list)
	if err != nil {
		return nil, err
	}
	// Each number stands for prefix+number, followed by every expansion of
	// the suffix (which may hold more brackets).
	tails := []string{""}
	if suffix != "" {
		if tails, err = expandName(nil, suffix, list); err != nil {
			return nil, err
		}
	}
	if len(out)+len(nums)*len(tails) > maxNodes {
		return nil, nodelistError(list, fmt.Sprintf("more than %d names", maxNodes))
	}
	for _, n := range nums {
		for _, t := range tails {
			out = append(out, prefix+n+t)
		}
	}
	return out, nil
}

// expandRanges expands the inside of a bracket: "01-04,07" → 01 02 03 04 07.
func expandRanges(inner, list string) ([]string, error) {
	if inner == "" {
		return nil, nodelistError(list, "an empty bracket")
	}
	var out []string
	for _, r := range strings.Split(inner, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !digits(lo) || (isRange && !digits(hi)) {
			return nil, nodelistError(list, "a range that is not digits: "+quote(r))
		}
		if !isRange {
			out = append(out, lo)
			continue
		}
		a, err1 := strconv.ParseUint(lo, 10, 63)
		b, err2 := strconv.ParseUint(hi, 10, 63)
		if err1 != nil || err2 != nil {
			return nil, nodelistError(list, "a number out of range in "+quote(r))
		}
		if b < a {
			return nil, nodelistError(list, "a reversed range "+quote(r))
		}
		if b-a >= maxNodes || len(out)+int(b-a) >= maxNodes {
			return nil, nodelistError(list, fmt.Sprintf("more than %d names", maxNodes))
		}
		for v := a; v <= b; v++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), v))
		}
	}
	return out, nil
}

func digits(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func nodelistError(list, msg string) error {
	return fmt.Errorf("launch: node list %s: %s", quote(list), msg)
}

// tasksOnNode reads Slurm's tasks-per-node list, "2(x3),1" (2 tasks on each
// of the first 3 nodes, then 1), and returns the count of node i.
func tasksOnNode(list string, node int) (int, error) {
	if node < 0 {
		return 0, fmt.Errorf("node %d", node)
	}
	seen := 0
	for _, part := range strings.Split(list, ",") {
		count, times := part, "1"
		if c, rep, ok := strings.Cut(part, "(x"); ok {
			if !strings.HasSuffix(rep, ")") {
				return 0, fmt.Errorf("%s: no ')'", quote(part))
			}
			count, times = c, strings.TrimSuffix(rep, ")")
		}
		n, err1 := strconv.Atoi(count)
		k, err2 := strconv.Atoi(times)
		if err1 != nil || err2 != nil || n < 0 || k < 1 {
			return 0, fmt.Errorf("%s is not a count or count(xN)", quote(part))
		}
		if node < seen+k {
			return n, nil
		}
		seen += k
	}
	return 0, fmt.Errorf("lists %d nodes, not node %d", seen, node)
}
