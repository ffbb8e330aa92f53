package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// flagFuncs are the flag package's functions and FlagSet methods that define a flag, each with
// the index of its name argument.
var flagFuncs = map[string]int{
	"String": 0, "Bool": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Float64": 0, "Duration": 0,
	"Func": 0, "BoolFunc": 0,
	"StringVar": 1, "BoolVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1,
	"Float64Var": 1, "DurationVar": 1, "Var": 1, "TextVar": 1,
}

// SourceFlags reads each tool's flags from its source, without building it: the flags
// cmd/TOOL/*.go defines (calls such as fs.StringVar(&x, "name", ...) or flag.Bool("name", ...)
// on a value named fs or the flag package), plus those of each cmd/internal/cli type the tool
// names (cli.LogFlags, cli.PolicyFlags, ...), with the types those embed. What --help lists,
// for the way towerrl's tools define flags (TestSourceFlagsMatchHelp checks it).
func SourceFlags(root string) (map[string]map[string]bool, error) {
	// Each cli type's flags, and the cli types its methods name (PolicyFlags: HeadFlags).
	cliFlags := map[string]map[string]bool{}
	cliUses := map[string][]string{}
	files, err := parseDir(filepath.Join(root, "cmd", "internal", "cli"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			t := fn.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			id, ok := t.(*ast.Ident)
			if !ok {
				continue
			}
			if cliFlags[id.Name] == nil {
				cliFlags[id.Name] = map[string]bool{}
			}
			defined(fn.Body, cliFlags[id.Name])
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					cliUses[id.Name] = append(cliUses[id.Name], sel.Sel.Name)
				}
				return true
			})
		}
	}
	var addType func(flags map[string]bool, t string, seen map[string]bool)
	addType = func(flags map[string]bool, t string, seen map[string]bool) {
		if seen[t] || cliFlags[t] == nil {
			return
		}
		seen[t] = true
		for f := range cliFlags[t] {
			flags[f] = true
		}
		for _, u := range cliUses[t] {
			addType(flags, u, seen)
		}
	}
	out := map[string]map[string]bool{}
	for _, tool := range Tools {
		files, err := parseDir(filepath.Join(root, "cmd", tool))
		if err != nil {
			return nil, err
		}
		flags := map[string]bool{"help": true, "h": true}
		seen := map[string]bool{}
		for _, f := range files {
			defined(f, flags)
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "cli" {
						addType(flags, sel.Sel.Name, seen)
					}
				}
				return true
			})
		}
		if len(flags) == 2 {
			return nil, fmt.Errorf("found no flag definitions in cmd/%s", tool)
		}
		out[tool] = flags
	}
	return out, nil
}

// defined adds the names of the flags defined under n to flags.
func defined(n ast.Node, flags map[string]bool) {
	ast.Inspect(n, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		i, ok := flagFuncs[sel.Sel.Name]
		x, isIdent := sel.X.(*ast.Ident)
		if !ok || !isIdent || (x.Name != "fs" && x.Name != "flag") || len(call.Args) <= i {
			return true
		}
		if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if name, err := strconv.Unquote(lit.Value); err == nil {
				flags[name] = true
			}
		}
		return true
	})
}

// parseDir parses the Go files of dir other than tests.
func parseDir(dir string) ([]*ast.File, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	return files, nil
}
