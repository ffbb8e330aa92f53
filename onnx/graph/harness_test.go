package graph

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// A harness for small hand-written ONNX graphs with any number of inputs and outputs of any
// element type: ONNX Runtime computes the reference forward pass, and central differences in
// float64 check the gradients of the float outputs with respect to every parameter and
// every float input.

// port is a graph input or output: its element type and shape (-1: the dynamic batch).
type port struct {
	name  string
	elem  onnxpb.TensorProto_DataType
	shape []int64
}

func f32(name string, shape ...int64) port { return port{name, onnxpb.TensorProto_FLOAT, shape} }
func i64(name string, shape ...int64) port { return port{name, onnxpb.TensorProto_INT64, shape} }
func u8(name string, shape ...int64) port  { return port{name, onnxpb.TensorProto_UINT8, shape} }

func (p port) valueInfo() *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range p.shape {
		dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}}
		if d < 0 {
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
		}
		shape.Dim = append(shape.Dim, dim)
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(p.name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(p.elem)), Shape: shape}}}}
}

func (p port) concrete(batch int) []int {
	out := make([]int, len(p.shape))
	for k, d := range p.shape {
		out[k] = int(d)
		if d < 0 {
			out[k] = batch
		}
	}
	return out
}

// opCase is one small graph.
type opCase struct {
	opset   int64
	inputs  []port
	outputs []port
	inits   []*onnxpb.TensorProto
	nodes   []*onnxpb.NodeProto
	// gen makes the values of input k (default: standard normal for floats, 0..255 for
	// integers).
	gen func(rng *rand.Rand, k int, n int) []float64
	// noGrad names float outputs left out of the gradient check (integer ones always are).
	noGrad []string
	// tol is the forward tolerance against ORT (default 1e-5, relative above 1).
	tol float64
}

func (c opCase) bytes(t testing.TB) []byte {
	t.Helper()
	g := &onnxpb.GraphProto{Name: proto.String("case"), Node: c.nodes, Initializer: c.inits}
	for _, p := range c.inputs {
		g.Input = append(g.Input, p.valueInfo())
	}
	for _, p := range c.outputs {
		g.Output = append(g.Output, p.valueInfo())
	}
	mp := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g, ProducerName: proto.String("towerrl-test"),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(c.opset)}}}
	data, err := proto.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// feeds makes the input values.
func (c opCase) feeds(batch int) [][]float64 {
	rng := rand.New(rand.NewPCG(5, 8))
	out := make([][]float64, len(c.inputs))
	for k, p := range c.inputs {
		n := product(p.concrete(batch))
		if c.gen != nil {
			if v := c.gen(rng, k, n); v != nil {
				out[k] = v
				continue
			}
		}
		for range n {
			if isFloatType(int32(p.elem)) {
				out[k] = append(out[k], rng.NormFloat64())
			} else {
				out[k] = append(out[k], float64(rng.IntN(256)))
			}
		}
	}
	return out
}

// ortOutputs runs the case on ONNX Runtime.
func ortOutputs(t testing.TB, model []byte, c opCase, batch int, feeds [][]float64) [][]float64 {
	t.Helper()
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 1
	for k, p := range c.inputs {
		shape := p.concrete(batch)
		s64 := make([]int64, len(shape))
		for d, v := range shape {
			s64[d] = int64(v)
		}
		switch p.elem {
		case onnxpb.TensorProto_FLOAT:
			data := make([]float32, len(feeds[k]))
			for i, v := range feeds[k] {
				data[i] = float32(v)
			}
			n, err = onnx.Feed(s, k, s64, data)
		case onnxpb.TensorProto_UINT8:
			data := make([]uint8, len(feeds[k]))
			for i, v := range feeds[k] {
				data[i] = uint8(v)
			}
			n, err = onnx.Feed(s, k, s64, data)
		case onnxpb.TensorProto_INT64:
			data := make([]int64, len(feeds[k]))
			for i, v := range feeds[k] {
				data[i] = int64(v)
			}
			n, err = onnx.Feed(s, k, s64, data)
		default:
			t.Fatalf("harness: input type %v", p.elem)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.StaticBatch() {
		n = s.MaxBatch()
	}
	if err := s.Run(n); err != nil {
		t.Fatal(err)
	}
	var outs [][]float64
	for k, info := range s.Outputs() {
		size := info.RowSize()
		if info.Batched {
			size *= n
		}
		var vals []float64
		switch info.DType {
		case onnx.Float32:
			o, err := onnx.Output[float32](s, k)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range o[:size] {
				vals = append(vals, float64(v))
			}
		case onnx.Float64:
			o, err := onnx.Output[float64](s, k)
			if err != nil {
				t.Fatal(err)
			}
			vals = slices.Clone(o[:size])
		case onnx.Int64:
			o, err := onnx.Output[int64](s, k)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range o[:size] {
				vals = append(vals, float64(v))
			}
		default:
			t.Fatalf("harness: output %q of type %v", info.Name, info.DType)
		}
		outs = append(outs, vals)
	}
	return outs
}

var trainAll = regexp.MustCompile(".")

// buildCase builds the case for the given outputs over p, with every input's concrete shape.
func buildCase(t testing.TB, m *Model, c opCase, p *Params, batch int, outputs []string) *Graph {
	t.Helper()
	shapes := map[string][]int{}
	for _, in := range c.inputs {
		shapes[in.name] = in.concrete(batch)
	}
	gr, err := m.BuildWith(G.NewGraph(), p, BuildOptions{Batch: batch, Outputs: outputs, Shapes: shapes})
	if err != nil {
		t.Fatal(err)
	}
	return gr
}

func denseOf(dt tensor.Dtype, shape []int, vals []float64) *tensor.Dense {
	return newDense(dt, tensor.Shape(shape), vals)
}

// runCase checks the case's forward pass against ONNX Runtime and its gradients against
// finite differences.
func runCase(t *testing.T, c opCase) {
	const batch = 3
	data := c.bytes(t)
	feeds := c.feeds(batch)
	want := ortOutputs(t, data, c, batch, feeds)
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.NewParamsFor(TrainOptions{Train: trainAll})
	if err != nil {
		t.Fatal(err)
	}
	gr := buildCase(t, m, c, p, batch, nil)
	var ins []*tensor.Dense
	for k, in := range c.inputs {
		ins = append(ins, denseOf(tensor.Float32, in.concrete(batch), feeds[k]))
	}
	got := forward(t, gr, ins...)
	tol := c.tol
	if tol == 0 {
		tol = 1e-5
	}
	for k, o := range c.outputs {
		if len(got[k]) != len(want[k]) {
			t.Fatalf("output %q: %d values (shape %v), ORT %d", o.name, len(got[k]), gr.Outputs()[k].Shape(), len(want[k]))
		}
		worst := 0.0
		for i := range want[k] {
			worst = math.Max(worst, relErr(got[k][i], want[k][i]))
		}
		if worst > tol {
			t.Errorf("output %q: worst error vs ORT %.3g > %g\ngot  %v\nwant %v", o.name, worst, tol, head(got[k]), head(want[k]))
		} else if testing.Verbose() {
			fmt.Printf("case %s output %s: worst error vs ORT %.3g\n", t.Name(), o.name, worst)
		}
	}
	var gradOuts []string
	for _, o := range c.outputs {
		if isFloatType(int32(o.elem)) && !slices.Contains(c.noGrad, o.name) {
			gradOuts = append(gradOuts, o.name)
		}
	}
	if len(gradOuts) > 0 {
		checkGradients(t, m, c, batch, feeds, gradOuts)
	}
}

// relErr is |got - want| relative to max(1, |want|): an absolute error for values up to 1, a
// relative one above, where float32 cannot hold 1e-5 absolute (its spacing is 7.6e-6 at 100).
func relErr(got, want float64) float64 {
	if math.IsNaN(got) != math.IsNaN(want) || math.IsInf(want, 0) && got != want {
		return math.Inf(1)
	}
	if got == want {
		return 0
	}
	return math.Abs(got-want) / math.Max(1, math.Abs(want))
}

func head(v []float64) []float64 { return v[:min(len(v), 8)] }

// checkGradients compares the analytic gradient of Σ_k Σ w_k ⊙ output_k with central
// differences, in float64, with respect to sampled entries of every parameter and every
// float input.
func checkGradients(t *testing.T, m *Model, c opCase, batch int, feeds [][]float64, outputs []string) {
	t.Helper()
	p32, err := m.NewParamsFor(TrainOptions{Outputs: outputs, Train: trainAll})
	if err != nil {
		t.Fatal(err)
	}
	p, err := p32.As(tensor.Float64)
	if err != nil {
		t.Fatal(err)
	}
	gr := buildCase(t, m, c, p, batch, outputs)
	g := gr.ExprGraph()
	rng := rand.New(rand.NewPCG(7, 11))
	var loss *G.Node
	for _, o := range gr.Outputs() {
		w := make([]float64, max(o.Shape().TotalSize(), 1))
		for k := range w {
			w[k] = rng.Float64()*2 - 1
		}
		var wn *G.Node
		if o.IsScalar() {
			wn = G.NewConstant(w[0], G.In(g))
		} else {
			wn = G.NewConstant(newDense(tensor.Float64, o.Shape(), w), G.WithName("w/"+o.Name()), G.In(g))
		}
		s, err := G.Sum(G.Must(G.HadamardProd(o, wn)))
		if err != nil {
			t.Fatal(err)
		}
		if loss == nil {
			loss = s
		} else {
			loss = G.Must(G.Add(loss, s))
		}
	}
	type wrt struct {
		name string
		n    *G.Node
		vals []float64 // the values to perturb in place
	}
	var ws []wrt
	for _, n := range gr.Learnables() {
		v, _ := p.Value(n.Name())
		ws = append(ws, wrt{n.Name(), n, v.Data().([]float64)})
	}
	ins := make([]*tensor.Dense, len(c.inputs))
	for k, in := range c.inputs {
		ins[k] = denseOf(tensor.Float64, in.concrete(batch), feeds[k])
		if err := G.Let(gr.Inputs()[k], ins[k]); err != nil {
			t.Fatal(err)
		}
		if isFloatType(int32(in.elem)) && reaches(gr.Inputs()[k], loss) {
			ws = append(ws, wrt{in.name, gr.Inputs()[k], ins[k].Data().([]float64)})
		}
	}
	if len(ws) == 0 {
		return
	}
	nodes := make(G.Nodes, len(ws))
	for k := range ws {
		nodes[k] = ws[k].n
	}
	grads, err := G.Grad(loss, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	analytic := make([][]float64, len(ws))
	for k := range ws {
		analytic[k] = valueFloats(t, grads[k].Value())
	}
	fwd := G.NewTapeMachine(g.SubgraphRoots(loss))
	defer fwd.Close()
	eval := func() float64 {
		fwd.Reset()
		if err := fwd.RunAll(); err != nil {
			t.Fatal(err)
		}
		return scalarOf(t, loss)
	}
	const eps = 1e-6
	worst := 0.0
	for k, w := range ws {
		picks := []int{0, len(w.vals) / 2, len(w.vals) - 1, rng.IntN(len(w.vals)), rng.IntN(len(w.vals))}
		for _, i := range picks {
			orig := w.vals[i]
			w.vals[i] = orig + eps
			up := eval()
			w.vals[i] = orig - eps
			down := eval()
			w.vals[i] = orig
			fd := (up - down) / (2 * eps)
			e := math.Abs(fd-analytic[k][i]) / math.Max(1, math.Abs(fd))
			worst = math.Max(worst, e)
			if e > 1e-5 {
				t.Errorf("d loss / d %s[%d]: analytic %.8g, finite differences %.8g", w.name, i, analytic[k][i], fd)
			}
		}
	}
	if testing.Verbose() {
		fmt.Printf("case %s: gradients of %d tensors, worst relative error vs finite differences %.3g\n", t.Name(), len(ws), worst)
	}
}

// reaches reports whether the loss depends on node n.
func reaches(n, loss *G.Node) bool {
	found := false
	for x := range G.WalkGraph(loss) {
		found = found || x == n
	}
	return found
}

// Shorthands for writing cases.

func node(op string, in []string, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(op + "_" + out[0]), Input: in, Output: out, Attribute: attrs}
}

func ins(names ...string) []string { return names }

func scalarInit(name string, v float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: []float32{v}}
}

func floatsInit(name string, dims []int64, vals ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: vals}
}

func intScalar(name string, v int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{v}}
}

func boolInit(name string, vals ...bool) *onnxpb.TensorProto {
	var iv []int32
	for _, v := range vals {
		if v {
			iv = append(iv, 1)
		} else {
			iv = append(iv, 0)
		}
	}
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: []int64{int64(len(vals))}, DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Int32Data: iv}
}

func aTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

func aStrings(name string, vs ...string) *onnxpb.AttributeProto {
	var bs [][]byte
	for _, v := range vs {
		bs = append(bs, []byte(v))
	}
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRINGS.Enum(), Strings: bs}
}

// positive makes every float input positive (for Log, Sqrt, Pow).
func positive(rng *rand.Rand, k, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = 0.2 + 2*rng.Float64()
	}
	return out
}

func aGraph(name string, nodes []*onnxpb.NodeProto, outputs ...port) *onnxpb.AttributeProto {
	g := &onnxpb.GraphProto{Name: proto.String(name), Node: nodes}
	for _, o := range outputs {
		g.Output = append(g.Output, o.valueInfo())
	}
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: g}
}

func proto32(dt onnxpb.TensorProto_DataType) *int32 { v := int32(dt); return &v }
