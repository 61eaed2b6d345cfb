package nccl_test

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLayers holds the root package's files to the layers that
// docs/architecture.md gives them: a file may use the names (package-level
// names, methods, struct fields) declared in its own layer and the layers
// below, and a name from a higher layer only where the document lists that
// reference with its reason. A file the table does not place fails the test,
// as does a listed reference that no longer runs up.
//
// The references are the type checker's: go/types resolves every identifier
// of the package's non-test files, so a field and a type that share a name
// (a Path field, the Path type) are told apart. The standard library is read
// from GOROOT's sources and the module's own packages from this tree; those
// of other modules (x/sys, purego) are left empty, and the only type errors
// allowed are their names being undefined: nothing of theirs yields a value
// of this package's types, so every name of this package resolves. Nothing
// outside GOROOT and the tree is read, and no command is run.
func TestLayers(t *testing.T) {
	doc, err := readLayers("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	refs, files, err := rootReferences(".")
	if err != nil {
		t.Fatal(err)
	}

	for _, f := range files {
		if _, ok := doc.layer[f]; !ok {
			t.Errorf("%s is on no layer of docs/architecture.md: add it to the table (layers of what it uses, and below what uses it)", f)
		}
	}
	for f := range doc.layer {
		if !slices.Contains(files, f) {
			t.Errorf("docs/architecture.md places %s, which the package does not have", f)
		}
	}

	names, same, back := 0, 0, 0
	used := map[edge]map[string]bool{}
	var up []string
	for _, e := range sortedEdges(refs) {
		names += len(refs[e])
		lf, lt := doc.layer[e.from], doc.layer[e.to]
		switch {
		case lf == 0 || lt == 0: // not placed: reported above
			continue
		case lf == lt:
			same++
			continue
		case lf > lt:
			continue
		}
		back++
		var bad []string
		used[e] = map[string]bool{}
		for _, n := range refs[e] {
			if doc.allowed[e][n] {
				used[e][n] = true
			} else {
				bad = append(bad, n)
			}
		}
		up = append(up, fmt.Sprintf("%s (layer %d) -> %s (layer %d): %s", e.from, lf, e.to, lt, strings.Join(refs[e], ", ")))
		if len(bad) > 0 {
			t.Errorf("%s (layer %d) uses %s of %s (layer %d), a higher layer: move the code to the layer it belongs to, or list the reference with its reason in docs/architecture.md", e.from, lf, strings.Join(bad, ", "), e.to, lt)
		}
	}
	for _, e := range sortedEdges(doc.allowed) {
		for n := range doc.allowed[e] {
			if !used[e][n] {
				t.Errorf("docs/architecture.md lists %s -> %s (%s) as a reference that runs up, but it does not now: strike it", e.from, e.to, n)
			}
		}
	}
	t.Logf("%d files on %d layers; %d file-to-file references (%d names): %d within a layer, %d running up a layer before the listed exceptions", len(files), doc.layers, len(refs), names, same, back)
	for _, u := range up {
		t.Logf("  up: %s", u)
	}
}

type edge struct{ from, to string }

func sortedEdges[V any](m map[edge]V) []edge {
	es := make([]edge, 0, len(m))
	for e := range m {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b edge) int {
		return strings.Compare(a.from+"\x00"+a.to, b.from+"\x00"+b.to)
	})
	return es
}

// layerDoc is the "Layers" section of docs/architecture.md: each file's
// layer (1 is the bottom) and the references allowed to run up.
type layerDoc struct {
	layers  int
	layer   map[string]int
	allowed map[edge]map[string]bool
}

var (
	tableRow  = regexp.MustCompile(`^\|\s*(\d+)\s*\|([^|]*)\|`)
	allowLine = regexp.MustCompile("^- `([^`]+\\.go)` → `([^`]+\\.go)` \\(([^)]*)\\): (.+)$")
	backticks = regexp.MustCompile("`([^`]+)`")
)

// readLayers parses the section that starts at the heading "## Layers": a
// table whose rows are "| n | `a.go`, `b.go` | what |", layer 1 first, and a
// list of the references that run up, "- `a.go` → `b.go` (`name`, ...): why".
func readLayers(path string) (*layerDoc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &layerDoc{layer: map[string]int{}, allowed: map[edge]map[string]bool{}}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Layers"
			continue
		}
		if !in {
			continue
		}
		if m := tableRow.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n != d.layers+1 {
				return nil, fmt.Errorf("%s: layer %d follows layer %d", path, n, d.layers)
			}
			d.layers = n
			for _, b := range backticks.FindAllStringSubmatch(m[2], -1) {
				if prev, ok := d.layer[b[1]]; ok {
					return nil, fmt.Errorf("%s: %s on layers %d and %d", path, b[1], prev, n)
				}
				d.layer[b[1]] = n
			}
		}
		if m := allowLine.FindStringSubmatch(line); m != nil {
			e := edge{m[1], m[2]}
			if d.allowed[e] == nil {
				d.allowed[e] = map[string]bool{}
			}
			for _, b := range backticks.FindAllStringSubmatch(m[3], -1) {
				d.allowed[e][b[1]] = true
			}
		} else if strings.HasPrefix(line, "- `") {
			return nil, fmt.Errorf("%s: %q: want \"- `a.go` → `b.go` (`name`, ...): why\"", path, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if d.layers == 0 {
		return nil, fmt.Errorf("%s: no layer table under \"## Layers\"", path)
	}
	return d, nil
}

// rootReferences type-checks the package in dir (its non-test files for the
// build context of the test) and returns, for each pair of its files, the
// names one uses that the other declares, and the files.
func rootReferences(dir string) (map[edge][]string, []string, error) {
	fset := token.NewFileSet()
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, nil, err
	}
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	module, err := modulePath(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, nil, err
	}
	imp := &treeImporter{fset: fset, module: module, root: dir, std: importer.ForCompiler(fset, "source", nil), pkgs: map[string]*types.Package{}}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	var errs []error
	conf := types.Config{Importer: imp, Error: func(err error) {
		// The only errors are the names of the packages left empty.
		if msg := err.(types.Error).Msg; !slices.ContainsFunc(imp.empty, func(p string) bool { return strings.HasPrefix(msg, "undefined: "+p+".") }) {
			errs = append(errs, err)
		}
	}}
	self, _ := conf.Check(module, fset, files, info)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("type-checking the package: %w", errors.Join(errs...))
	}

	sets := map[edge]map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Pkg() != self || !declaredAtTop(obj, self) {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to {
			continue
		}
		e := edge{from, to}
		if sets[e] == nil {
			sets[e] = map[string]bool{}
		}
		sets[e][obj.Name()] = true
	}
	refs := map[edge][]string{}
	for e, s := range sets {
		for n := range s {
			refs[e] = append(refs[e], n)
		}
		slices.Sort(refs[e])
	}
	// Files that other platforms or build tags compile must be on a layer too.
	all := slices.Clone(pkg.GoFiles)
	for _, name := range pkg.IgnoredGoFiles {
		if !strings.HasSuffix(name, "_test.go") {
			all = append(all, name)
		}
	}
	slices.Sort(all)
	return refs, all, nil
}

// declaredAtTop reports whether obj is a package-level name, a method or a
// struct field (not a local variable, parameter or label).
func declaredAtTop(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Func:
		return true
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	case *types.TypeName, *types.Const:
		return o.Parent() == pkg.Scope()
	}
	return false
}

func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(p), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// treeImporter gives the type checker the standard library from GOROOT's
// sources, the module's own packages from this tree, and every other module's
// packages empty: nothing outside the tree and GOROOT is read.
type treeImporter struct {
	fset         *token.FileSet
	module, root string
	std          types.Importer
	pkgs         map[string]*types.Package
	empty        []string // the names of the packages left empty
}

func (im *treeImporter) Import(path string) (*types.Package, error) {
	if p, ok := im.pkgs[path]; ok {
		return p, nil
	}
	var p *types.Package
	switch rel, ok := strings.CutPrefix(path, im.module+"/"); {
	case ok:
		dir := filepath.Join(im.root, filepath.FromSlash(rel))
		bp, err := build.ImportDir(dir, 0)
		if err != nil {
			return nil, err
		}
		var files []*ast.File
		for _, name := range bp.GoFiles {
			f, err := parser.ParseFile(im.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
		}
		conf := types.Config{Importer: im, Error: func(error) {}}
		p, _ = conf.Check(path, im.fset, files, nil)
	case !strings.Contains(strings.Split(path, "/")[0], "."):
		var err error
		if p, err = im.std.Import(path); err != nil {
			return nil, err
		}
	default:
		p = types.NewPackage(path, path[strings.LastIndex(path, "/")+1:])
		p.MarkComplete()
		im.empty = append(im.empty, p.Name())
	}
	im.pkgs[path] = p
	return p, nil
}
