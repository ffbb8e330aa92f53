package models

import (
	"fmt"
	"reflect"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A plan runs a compiled policy graph without gorgonia's tape machine: its nodes in the order
// the tape machine would run them (gorgonia's topological sort, reversed, as G.Compile does),
// each op's Do called on its inputs' values from the plan's own slots. It exists because the
// tape machine's interpretation costs more than the arithmetic at a PPO minibatch: per
// instruction it boxes log arguments, appends the inputs to a new slice, looks the node up in
// a map and binds the value to it, a dozen allocations and some µs per run of the 64×64 MLP's
// ~40 instructions.
//
// A plan takes only graphs whose every node it can run exactly as the tape machine does
// (newPlan says which; Compile uses the tape machine for the others): inputs and constants
// (their bound values), the Read statements of Watch (the plan copies the watched values out
// itself), and ops of other packages than gorgonia (this package's, the engine's fused losses)
// that neither overwrite an input nor call external code. Such ops get a fresh register from
// gorgonia's allocator and are called through Do, so the tape machine does nothing else with
// them either; a graph with any of gorgonia's own ops, or two nodes gorgonia's common
// subexpression elimination would merge, takes the tape machine. Unlike the tape machine, a
// plan does not bind values to the nodes: read them with Read (watched nodes) and Grads, as
// the package documents.
type plan struct {
	steps []step
	vals  []G.Value // one slot per node of the graph, by position in the sorted order
	leafs []leaf
	reads []readOut
	grads []gradOut
}

// step is one op node: its op, the slots of its inputs and of its value.
type step struct {
	node *G.Node
	op   G.Op
	in   []int
	args []G.Value // scratch for Do's arguments
	out  int
}

// leaf is an input or constant node, whose slot holds its bound value at the start of a run.
type leaf struct {
	node *G.Node
	slot int
}

// readOut copies a watched node's value (slot) into the Value its Read statement fills.
type readOut struct {
	slot int
	into *G.Value
}

// gradOut copies a bound parameter's gradient (slot) into the policy's gradient buffer.
type gradOut struct {
	slot int
	dst  []float32
	name string
}

// gorgoniaPkg is the package path of gorgonia's own ops.
var gorgoniaPkg = reflect.TypeOf(G.NewGraph()).Elem().PkgPath()

// newPlan makes the plan of p's graph, or returns nil with the reason it cannot (the tape
// machine runs such a graph). It reads p.reads (the Read statements Watch added, with the Value
// each fills) and, after placeGrads, the parameters whose gradients are not written in place,
// which the plan copies into gradBuf after each run.
func newPlan(p *Policy) (*plan, string) {
	sorted, err := G.Sort(p.Graph)
	if err != nil {
		return nil, err.Error()
	}
	// G.Compile runs the nodes in the reverse of G.Sort's order.
	for i, j := 0, len(sorted)-1; i < j; i, j = i+1, j-1 {
		sorted[i], sorted[j] = sorted[j], sorted[i]
	}
	pl := &plan{vals: make([]G.Value, len(sorted))}
	slot := make(map[*G.Node]int, len(sorted))
	hashes := make(map[uint32]bool, len(sorted))
	for i, n := range sorted {
		if h := n.Hashcode(); hashes[h] {
			return nil, fmt.Sprintf("node %q shares a hash with another (gorgonia would merge them)", n.Name())
		} else {
			hashes[h] = true
		}
		slot[n] = i
		var children []*G.Node
		for it := p.Graph.From(n.ID()); it.Next(); {
			children = append(children, it.Node().(*G.Node))
		}
		op := n.Op()
		if into, ok := p.reads[n]; ok {
			if len(children) != 1 {
				return nil, fmt.Sprintf("read statement %q of %d nodes", n.Name(), len(children))
			}
			pl.reads = append(pl.reads, readOut{slot: slot[children[0]], into: into})
			continue
		}
		if op == nil || (len(children) == 0 && isConstant(op)) {
			if n.Value() == nil {
				return nil, fmt.Sprintf("input %q has no value", n.Name())
			}
			pl.leafs = append(pl.leafs, leaf{node: n, slot: i})
			continue
		}
		t := reflect.TypeOf(op)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.PkgPath() == gorgoniaPkg || t.PkgPath() == "":
			return nil, fmt.Sprintf("node %q runs gorgonia's op %v", n.Name(), op)
		case op.CallsExtern() || op.OverwritesInput() >= 0:
			return nil, fmt.Sprintf("op %v calls external code or overwrites an input", op)
		}
		s := step{node: n, op: op, out: i, args: make([]G.Value, len(children))}
		for _, c := range children {
			k, ok := slot[c]
			if !ok {
				return nil, fmt.Sprintf("node %q reads %q before it is computed", n.Name(), c.Name())
			}
			s.in = append(s.in, k)
		}
		pl.steps = append(pl.steps, s)
	}
	for i, n := range p.Params {
		if p.direct == nil || p.direct[i] {
			continue
		}
		k, ok := slot[p.gradNodes[i]]
		if !ok {
			return nil, fmt.Sprintf("the gradient of %q is not in the graph", n.Name())
		}
		pl.grads = append(pl.grads, gradOut{slot: k, dst: p.gradBuf[p.params.offs[i]:p.params.offs[i+1]], name: n.Name()})
	}
	return pl, ""
}

// isConstant reports whether op is one of gorgonia's constants (G.NewConstant), whose node
// holds its value.
func isConstant(op G.Op) bool {
	t := reflect.TypeOf(op)
	return t.PkgPath() == gorgoniaPkg && (t.Name() == "constantScalar" || t.Name() == "constantTensor")
}

// run executes the plan once. The values stay in the slots until the next run.
func (pl *plan) run() error {
	for _, l := range pl.leafs {
		pl.vals[l.slot] = l.node.Value()
	}
	for i := range pl.steps {
		s := &pl.steps[i]
		for k, j := range s.in {
			s.args[k] = pl.vals[j]
		}
		v, err := s.op.Do(s.args...)
		if err != nil {
			return fmt.Errorf("%v (node %q): %w", s.op, s.node.Name(), err)
		}
		pl.vals[s.out] = v
	}
	for _, r := range pl.reads {
		if err := copyValue(r.into, pl.vals[r.slot]); err != nil {
			return err
		}
	}
	for _, g := range pl.grads {
		src, ok := floats(pl.vals[g.slot])
		if !ok || len(src) != len(g.dst) {
			return fmt.Errorf("%w: the gradient of %q is %v, want %d float32 values", ErrShape, g.name, pl.vals[g.slot], len(g.dst))
		}
		copy(g.dst, src)
	}
	return nil
}

// floats is v's float32 values when it is a dense float32 tensor (materialised if it is a view).
func floats(v G.Value) ([]float32, bool) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 {
		return nil, false
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	return d.Float32s(), true
}

// copyValue copies v into *into as the tape machine's Read does: into the Value already there
// when it has v's size, else into a clone.
func copyValue(into *G.Value, v G.Value) error {
	if v == nil {
		return fmt.Errorf("%w: a watched node has no value", ErrGraph)
	}
	switch src := v.(type) {
	case *G.F32:
		if dst, ok := (*into).(*G.F32); ok {
			*dst = *src
			return nil
		}
	case *tensor.Dense:
		if s, ok := floats(src); ok {
			if dst, ok := (*into).(*tensor.Dense); ok && dst.Dtype() == tensor.Float32 && dst.Shape().Eq(v.Shape()) && !dst.RequiresIterator() {
				copy(dst.Float32s(), s)
				return nil
			}
		}
	}
	c, err := G.CloneValue(v)
	if err != nil {
		return fmt.Errorf("%w: copying a watched value: %w", ErrGraph, err)
	}
	*into = c
	return nil
}
