package tape

import (
	"fmt"
	"reflect"
	"runtime/debug"
	"sync"

	G "gorgonia.org/gorgonia"
)

// The fast path calls gorgonia's unexported runall, so it must be the runall this package was
// written against. Two checks decide, once per binary (fastErr): the build information's
// gorgonia version where the binary lists its dependencies (test binaries do not), and in
// every binary the structure of the tape machine as reflect sees it (field names, types and
// offsets of tapeMachine and of the two structs runall reads through it), which any change
// to the internals runall relies on is bound to show.

// gorgoniaVersion is the gorgonia release whose unexported (*tapeMachine).runall the fast path
// calls; a binary that lists another version, or a replaced one, takes RunAll.
const gorgoniaVersion = "v0.9.18"

// machineType is *gorgonia.tapeMachine, read off NewTapeMachine's signature.
var machineType = reflect.TypeOf(G.NewTapeMachine).Out(0)

// field is one field of a struct as reflect describes it.
type field struct {
	Name   string
	Type   string // reflect.Type.String()
	Offset uintptr
}

// layout is one struct type as reflect describes it.
type layout struct {
	Type   string // reflect.Type.String(), e.g. "gorgonia.tapeMachine"
	Size   uintptr
	Fields []field
}

// describe returns the layouts of the struct that t (a *gorgonia.tapeMachine) points to and of
// the structs runall reads through it: the embedded ExternMetadata and the program behind p.
// A t of another shape gives what can be described of it, which no expected layout matches.
func describe(t reflect.Type) []layout {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return []layout{{Type: t.String(), Size: t.Size()}}
	}
	out := []layout{describeStruct(t)}
	for _, name := range []string{"ExternMetadata", "p"} {
		f, ok := t.FieldByName(name)
		if !ok {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, describeStruct(ft))
		}
	}
	return out
}

func describeStruct(t reflect.Type) layout {
	l := layout{Type: t.String(), Size: t.Size(), Fields: make([]field, t.NumField())}
	for i := range t.NumField() {
		f := t.Field(i)
		l.Fields[i] = field{Name: f.Name, Type: f.Type.String(), Offset: f.Offset}
	}
	return l
}

// compare returns nil when got is want, else an error naming the first difference.
func compare(got, want []layout) error {
	for i, w := range want {
		if i >= len(got) {
			return fmt.Errorf("tape: gorgonia has no struct %s where runall expects one", w.Type)
		}
		g := got[i]
		if g.Type != w.Type || g.Size != w.Size {
			return fmt.Errorf("tape: gorgonia's struct %d is %s of %d bytes, runall expects %s of %d",
				i, g.Type, g.Size, w.Type, w.Size)
		}
		for j, wf := range w.Fields {
			if j >= len(g.Fields) {
				return fmt.Errorf("tape: gorgonia's %s has no field %s", w.Type, wf.Name)
			}
			if gf := g.Fields[j]; gf != wf {
				return fmt.Errorf("tape: gorgonia's %s field %d is %s %s at offset %d, runall expects %s %s at %d",
					w.Type, j, gf.Name, gf.Type, gf.Offset, wf.Name, wf.Type, wf.Offset)
			}
		}
		if len(g.Fields) > len(w.Fields) {
			return fmt.Errorf("tape: gorgonia's %s has a field %s runall does not expect", w.Type, g.Fields[len(w.Fields)].Name)
		}
	}
	if len(got) > len(want) {
		return fmt.Errorf("tape: gorgonia has a struct %s runall does not expect", got[len(want)].Type)
	}
	return nil
}

// checkVersion returns nil unless the build information (ok: ReadBuildInfo found it) lists a
// gorgonia module other than gorgoniaVersion unreplaced. Test binaries list no dependencies:
// for them the structure alone decides.
func checkVersion(info *debug.BuildInfo, ok bool) error {
	if !ok {
		return nil
	}
	for _, d := range info.Deps {
		if d.Path != "gorgonia.org/gorgonia" {
			continue
		}
		if d.Replace != nil {
			return fmt.Errorf("tape: gorgonia is replaced by %s %s; runall was checked against the released %s",
				d.Replace.Path, d.Replace.Version, gorgoniaVersion)
		}
		if d.Version != gorgoniaVersion {
			return fmt.Errorf("tape: gorgonia is %s; runall was checked against %s", d.Version, gorgoniaVersion)
		}
	}
	return nil
}

// fastErr is why no Machine in this binary may take the fast path, or nil.
var fastErr = sync.OnceValue(func() error {
	if errBuild != nil {
		return errBuild
	}
	if err := checkVersion(debug.ReadBuildInfo()); err != nil {
		return err
	}
	return compare(describe(machineType), v0918())
})

// v0918 is the tape machine of gorgonia v0.9.18 on a 64-bit platform, built without the cuda
// tag (a 32-bit platform's offsets differ, so it takes RunAll). TestLayout prints the current
// description when it differs.
func v0918() []layout {
	return []layout{
		{Type: "gorgonia.tapeMachine", Size: 296, Fields: []field{
			{"ExternMetadata", "gorgonia.ExternMetadata", 0},
			{"p", "*gorgonia.program", 48},
			{"locMap", "map[*gorgonia.Node]gorgonia.register", 56},
			{"cpumem", "[]gorgonia.Value", 64},
			{"gpumem", "[]gorgonia.Value", 88},
			{"pc", "int", 112},
			{"bindNodesDV", "gorgonia.Nodes", 120},
			{"watchNodes", "gorgonia.Nodes", 144},
			{"watchRegs", "[]gorgonia.register", 168},
			{"watchNodeIDs", "[]gorgonia.NodeID", 192},
			{"logger", "*log.Logger", 216},
			{"buf", "*bytes.Buffer", 224},
			{"valueFmt", "string", 232},
			{"tabcount", "int", 248},
			{"logFlags", "uint16", 256},
			{"closureQueue", "[]func() error", 264},
			{"runFlags", "uint16", 288},
			{"evalMode", "bool", 290},
		}},
		{Type: "gorgonia.ExternMetadata", Size: 48, Fields: []field{
			{"Engine", "tensor.Engine", 0},
			{"b", "gorgonia.batchedBLAS", 16},
			{"workAvailable", "chan bool", 32},
			{"syncChan", "chan struct {}", 40},
		}},
		{Type: "gorgonia.program", Size: 136, Fields: []field{
			{"instructions", "gorgonia.fragment", 0},
			{"args", "int", 24},
			{"cpulocs", "int", 32},
			{"gpulocs", "int", 40},
			{"cpumem", "int64", 48},
			{"gpumem", "[]int64", 56},
			{"g", "*gorgonia.ExprGraph", 80},
			{"df", "*gorgonia.dataflow", 88},
			{"m", "map[*gorgonia.Node]gorgonia.fragment", 96},
			{"r", "map[int64]*gorgonia.Node", 104},
			{"sorted", "gorgonia.Nodes", 112},
		}},
	}
}
