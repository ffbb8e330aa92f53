package layout

import (
	"slices"
	"strings"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// linear is a fully connected layer: a Gemm by a constant weight, or a MatMul by one with an
// optional Add of a constant bias.
type linear struct {
	op     string // "Gemm", "MatMul" or "MatMul+Add"
	out    string // the layer's output
	width  int64  // its output features
	path   string // module path: "policy.action_net"
	tokens []string
	node   int // index of its last node
}

// linears lists the graph's fully connected layers in graph order.
func (x *index) linears() []linear {
	if x.lin != nil {
		return x.lin
	}
	x.lin = []linear{}
	for i, n := range x.nodes {
		in := n.GetInput()
		if len(in) < 2 || !x.isConst(in[1]) || len(n.GetOutput()) == 0 {
			continue
		}
		w := x.tensor(in[1])
		switch n.GetOpType() {
		case "Gemm":
			if len(w.shape) != 2 {
				continue
			}
			width := w.shape[1]
			if attrInt(n, "transB", 0) != 0 {
				width = w.shape[0]
			}
			names := []string{in[1]}
			if len(in) > 2 {
				names = append(names, in[2])
			}
			x.lin = append(x.lin, x.newLinear("Gemm", n.GetOutput()[0], width, i, names, n.GetName()))
		case "MatMul":
			if len(w.shape) != 2 {
				continue
			}
			l := x.newLinear("MatMul", n.GetOutput()[0], w.shape[1], i, []string{in[1]}, n.GetName())
			if c := x.consumers[l.out]; len(c) == 1 && x.nodes[c[0]].GetOpType() == "Add" {
				add := x.nodes[c[0]]
				for _, b := range add.GetInput() {
					if b != l.out && x.isConst(b) {
						l = x.newLinear("MatMul+Add", add.GetOutput()[0], w.shape[1], c[0], []string{b, in[1]}, add.GetName(), n.GetName())
					}
				}
			}
			x.lin = append(x.lin, l)
		}
	}
	return x.lin
}

func (x *index) newLinear(op, out string, width int64, node int, params []string, nodeNames ...string) linear {
	l := linear{op: op, out: out, width: width, node: node}
	for _, p := range params {
		if l.path = paramModule(p); l.path != "" {
			break
		}
	}
	for _, n := range nodeNames {
		if l.path != "" {
			break
		}
		l.path = nodeModule(n)
	}
	if l.path == "" {
		l.path = "an unnamed layer"
	}
	l.tokens = tokens(l.path)
	return l
}

// linearOf returns the layer whose output is name.
func (x *index) linearOf(name string) (linear, bool) {
	for _, l := range x.linears() {
		if l.out == name {
			return l, true
		}
	}
	return linear{}, false
}

// paramModule is the module path of a parameter named like "policy.action_net.weight"; empty
// for names the exporter made up ("onnx::MatMul_123").
func paramModule(name string) string {
	if strings.HasPrefix(name, "onnx::") || !strings.Contains(name, ".") {
		return ""
	}
	return name[:strings.LastIndex(name, ".")]
}

// nodeModule is the module path of a node named like torch ≥ 1.13 names them:
// "/policy/mlp_extractor/policy_net/policy_net.0/Gemm" → "policy.mlp_extractor.policy_net.0".
func nodeModule(name string) string {
	parts := strings.Split(strings.Trim(name, "/"), "/")
	if len(parts) < 2 {
		return ""
	}
	var out []string
	for _, c := range parts[:len(parts)-1] {
		if k := len(out) - 1; k >= 0 && strings.HasPrefix(c, out[k]+".") {
			out[k] = c
			continue
		}
		out = append(out, c)
	}
	return strings.Join(out, ".")
}

func tokens(path string) []string {
	return strings.FieldsFunc(strings.ToLower(path), func(r rune) bool { return r == '.' || r == '/' })
}

// hasToken reports whether the module path tokens include any of want.
func hasToken(toks []string, want ...string) bool {
	for _, w := range want {
		if slices.Contains(toks, w) {
			return true
		}
	}
	return false
}

// shapeOps pass a tensor's values through unchanged (up to layout).
var shapeOps = map[string]bool{
	"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true,
	"Expand": true, "Cast": true,
}

// affine reports whether n is an elementwise Add, Sub, Mul or Div with one constant operand,
// and returns the other operand.
func (x *index) affine(n *onnxpb.NodeProto) (data string, ok bool) {
	switch n.GetOpType() {
	case "Add", "Sub", "Mul", "Div":
	default:
		return "", false
	}
	in := n.GetInput()
	if len(in) != 2 {
		return "", false
	}
	switch {
	case x.isConst(in[1]) && !x.isConst(in[0]):
		return in[0], true
	case x.isConst(in[0]) && !x.isConst(in[1]):
		return in[1], true
	}
	return "", false
}

// back follows name towards its source while step, given its producer, names the input to go
// on from; it returns the last tensor reached.
func (x *index) back(name string, step func(n *onnxpb.NodeProto) (string, bool)) string {
	for range 64 {
		n := x.producer(name)
		if n == nil {
			return name
		}
		next, ok := step(n)
		if !ok || next == "" {
			return name
		}
		name = next
	}
	return name
}

// throughShape steps back through shapeOps.
func throughShape(n *onnxpb.NodeProto) (string, bool) {
	if shapeOps[n.GetOpType()] && len(n.GetInput()) > 0 {
		return n.GetInput()[0], true
	}
	return "", false
}

// forward follows name through consumers accepted by pass (which returns false to stop) to a
// graph output, depth first; it returns the output and the nodes passed, or "" when none.
func (x *index) forward(name string, pass func(n *onnxpb.NodeProto, from string) bool) (string, []*onnxpb.NodeProto) {
	var walk func(name string, depth int, path []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto)
	walk = func(name string, depth int, path []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto) {
		if x.tensor(name).output {
			return name, path
		}
		if depth > 32 {
			return "", nil
		}
		for _, c := range x.consumers[name] {
			n := x.nodes[c]
			if !pass(n, name) || len(n.GetOutput()) == 0 {
				continue
			}
			if out, p := walk(n.GetOutput()[0], depth+1, append(slices.Clone(path), n)); out != "" {
				return out, p
			}
		}
		return "", nil
	}
	return walk(name, 0, nil)
}

// outputOf is a graph output holding name's values (name itself, or reached through
// shapeOps), so that binding it needs no exposing; name when there is none.
func (x *index) outputOf(name string) string {
	out, _ := x.forward(name, func(n *onnxpb.NodeProto, from string) bool {
		return shapeOps[n.GetOpType()] && n.GetInput()[0] == from && n.GetOpType() != "Cast"
	})
	if out == "" || x.rowSize(x.tensor(out)) != x.rowSize(x.tensor(name)) {
		return name
	}
	return out
}

// batched reports whether a tensor's dimension 0 runs over the batch: dynamic, or equal to the
// observation input's fixed batch.
func (x *index) batched(t *tensor) bool {
	if !t.known() || len(t.shape) == 0 || t.init || t.value != nil {
		return false
	}
	return t.shape[0] < 0 || (x.batch > 0 && t.shape[0] == x.batch)
}

// rowSize is the number of values a batch row of t holds (all of them for a tensor that does
// not follow the batch); -1 when unknown.
func (x *index) rowSize(t *tensor) int64 {
	if !t.known() {
		return -1
	}
	s := t.shape
	if x.batched(t) {
		s = s[1:]
	}
	return prod(s)
}

// info is t as a session would describe it.
func (x *index) info(t *tensor) head.Tensor {
	ti := head.Tensor{Name: t.name, DType: t.dtype, Declared: slices.Clone(t.shape), Batched: x.batched(t)}
	ti.Row = slices.Clone(t.shape)
	if ti.Batched {
		ti.Row = ti.Row[1:]
	}
	for i, d := range ti.Row {
		if d < 0 {
			ti.Row[i] = 1
		}
	}
	return ti
}
