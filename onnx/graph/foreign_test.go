package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// The real exporters' policies in testdata/foreign (scripts/gen_fixtures_foreign.py): each
// parses, builds for the tensors a trainer binds (NAME.json's "bind"), and computes what
// PyTorch recorded (graph outputs) and what ONNX Runtime computes (inner tensors).

const foreignDir = "../../testdata/foreign"

type foreignPort struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []any  `json:"shape"`
	Role  string `json:"role"`
	File  string `json:"file"`
	// SeqFile holds a recurrent fixture's output over the recorded sequences, with the
	// batch on BatchAxis of the output.
	SeqFile   string `json:"seq_file"`
	BatchAxis int    `json:"batch_axis"`
}

type foreignFixture struct {
	name      string
	Family    string             `json:"family"`
	Opset     int64              `json:"opset"`
	Dynamic   bool               `json:"dynamic_batch"`
	Inputs    []foreignPort      `json:"inputs"`
	Outputs   []foreignPort      `json:"outputs"`
	Extra     []foreignPort      `json:"extra_inputs"`
	Bind      map[string]*string `json:"bind"`
	Recurrent json.RawMessage    `json:"recurrent"`
	InputFile string             `json:"input_file"`
}

func foreignFixtures(t *testing.T) []foreignFixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(foreignDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no fixtures in %s; run scripts/gen_fixtures_foreign.py", foreignDir)
	}
	var out []foreignFixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var fx foreignFixture
		if err := json.Unmarshal(data, &fx); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		fx.name = strings.TrimSuffix(filepath.Base(p), ".json")
		out = append(out, fx)
	}
	return out
}

// parse reads and parses the fixture's model.
func (fx foreignFixture) parse(t *testing.T) ([]byte, *Model) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(foreignDir, fx.name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return data, m
}

// bound are the tensors a trainer needs: every non-null bind entry but the actions.
func (fx foreignFixture) bound() []string {
	var out []string
	for _, role := range []string{"logits", "mean", "log_std", "value"} {
		if v := fx.Bind[role]; v != nil && *v != "" && !slices.Contains(out, *v) {
			out = append(out, *v)
		}
	}
	return out
}

func readForeignNPY(t testing.TB, name string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(filepath.Join(foreignDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// npyFloats returns any numeric array's values as float64.
func npyFloats(a *npy.Array) []float64 {
	var out []float64
	switch {
	case a.F32 != nil:
		for _, v := range a.F32 {
			out = append(out, float64(v))
		}
	case a.F64 != nil:
		out = slices.Clone(a.F64)
	case a.I64 != nil:
		for _, v := range a.I64 {
			out = append(out, float64(v))
		}
	case a.I32 != nil:
		for _, v := range a.I32 {
			out = append(out, float64(v))
		}
	case a.U8 != nil:
		for _, v := range a.U8 {
			out = append(out, float64(v))
		}
	}
	return out
}

// withOutputs returns the model with extra graph outputs (inner tensors, typed FLOAT).
func withOutputs(t testing.TB, data []byte, names []string) []byte {
	t.Helper()
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	g := mp.GetGraph()
	for _, name := range names {
		if slices.ContainsFunc(g.GetOutput(), func(vi *onnxpb.ValueInfoProto) bool { return vi.GetName() == name }) {
			continue
		}
		g.Output = append(g.Output, &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{
			Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT))}}}})
	}
	out, err := proto.Marshal(&mp)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ortNamed runs a model with one input (float32, or uint8 when elem says so) on rows and
// returns the named outputs.
func ortNamed(t testing.TB, data []byte, shape []int, rows []float32, elem onnxpb.TensorProto_DataType, names []string) map[string][]float64 {
	t.Helper()
	s, err := onnx.New(context.Background(), data, onnx.Config{MaxBatch: shape[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s64 := make([]int64, len(shape))
	for k, d := range shape {
		s64[k] = int64(d)
	}
	var n int
	if elem == onnxpb.TensorProto_UINT8 {
		u8 := make([]uint8, len(rows))
		for k, v := range rows {
			u8[k] = uint8(v)
		}
		n, err = onnx.Feed(s, 0, s64, u8)
	} else {
		n, err = onnx.Feed(s, 0, s64, rows)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(n); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{}
	for k, info := range s.Outputs() {
		if !slices.Contains(names, info.Name) || info.DType != onnx.Float32 {
			continue
		}
		size := info.RowSize()
		if info.Batched {
			size *= n
		}
		o, err := onnx.Output[float32](s, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range o[:size] {
			out[info.Name] = append(out[info.Name], float64(v))
		}
	}
	return out
}

func TestForeignFixtures(t *testing.T) {
	for _, fx := range foreignFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			if len(fx.Recurrent) > 0 && string(fx.Recurrent) != "null" {
				testForeignRecurrent(t, fx)
				return
			}
			data, m := fx.parse(t)
			if m.Opset() != fx.Opset {
				t.Errorf("opset %d, the fixture says %d", m.Opset(), fx.Opset)
			}
			bound := fx.bound()
			if err := m.Check(bound...); err != nil {
				t.Fatalf("Check(%q): %v", bound, err)
			}
			in := readForeignNPY(t, fx.InputFile)
			rows := in.Shape[0]
			batch := rows
			if !fx.Dynamic {
				batch = m.Inputs()[0].Shape[0]
			}
			// Every recorded output the importer can compute, and the bound tensors.
			outs := slices.Clone(bound)
			for _, o := range fx.Outputs {
				if !slices.Contains(outs, o.Name) && o.Role != "state" && m.Check(o.Name) == nil {
					outs = append(outs, o.Name)
				}
			}
			var inner []string
			for _, name := range bound {
				if !slices.Contains(m.Outputs(), name) {
					inner = append(inner, name)
				}
			}
			p := m.NewParams()
			// Extra inputs (RLlib's dummy state) are fed zeros of the shape the fixture gives.
			shapes, extra := fx.extraShapes(t)
			gr, err := m.BuildWith(G.NewGraph(), p, BuildOptions{Batch: batch, Outputs: outs, Shapes: shapes})
			if err != nil {
				t.Fatal(err)
			}
			vm := G.NewTapeMachine(gr.ExprGraph())
			defer vm.Close()
			rowSize := in.Len() / rows
			vals := npyFloats(in)
			got := make([][]float64, len(outs))
			ref := map[string][]float64{}
			withInner := withOutputs(t, data, inner)
			for start := 0; start < rows; start += batch {
				x := denseOf(tensor.Float32, append([]int{batch}, in.Shape[1:]...), vals[start*rowSize:(start+batch)*rowSize])
				feeds := []*tensor.Dense{x}
				for _, in := range m.Inputs()[1:] {
					feeds = append(feeds, extra[in.Name])
				}
				res := runOnce(t, vm, gr, feeds...)
				for k := range outs {
					got[k] = append(got[k], res[k]...)
				}
				if len(inner) > 0 {
					f32 := make([]float32, batch*rowSize)
					for i := range f32 {
						f32[i] = float32(vals[start*rowSize+i])
					}
					for name, v := range ortNamed(t, withInner, append([]int{batch}, in.Shape[1:]...), f32, m.Inputs()[0].ElemType, inner) {
						ref[name] = append(ref[name], v...)
					}
				}
			}
			checked := 0
			for k, name := range outs {
				var want []float64
				source := "PyTorch"
				if i := slices.IndexFunc(fx.Outputs, func(o foreignPort) bool { return o.Name == name }); i >= 0 {
					want = npyFloats(readForeignNPY(t, fx.Outputs[i].File))
				} else {
					want, source = ref[name], "ONNX Runtime"
				}
				have := got[k]
				if len(want) != len(have) && len(have) == len(want)*rows/batch && name == strings.TrimSpace(name) {
					// A tensor without a batch dimension (log_std) computed once per run.
					have = have[:len(want)]
				}
				if len(want) != len(have) {
					t.Errorf("%s: %d values, %s has %d", name, len(have), source, len(want))
					continue
				}
				worst := 0.0
				for i := range want {
					worst = math.Max(worst, relErr(have[i], want[i]))
				}
				if worst > 1e-5 {
					t.Errorf("%s: worst error vs %s %.3g > 1e-5\nhave %v\nwant %v", name, source, worst, head(have), head(want))
				}
				if testing.Verbose() {
					fmt.Printf("foreign %s %s: worst error vs %s %.3g\n", fx.name, name, source, worst)
				}
				checked++
			}
			if checked < len(bound) {
				t.Errorf("checked %d tensors, %d are bound", checked, len(bound))
			}
			// The bound tensors are trainable: gradients reach every parameter they use.
			gr2, err := m.BuildWith(G.NewGraph(), m.NewParams(), BuildOptions{Batch: batch, Outputs: bound, Shapes: shapes})
			if err != nil {
				t.Fatal(err)
			}
			if len(gr2.Learnables()) == 0 {
				t.Errorf("no learnable parameters behind %v", bound)
			}
		})
	}
}

// extraShapes returns the fixture's extra inputs' shapes and zero values to feed them.
func (fx foreignFixture) extraShapes(t *testing.T) (map[string][]int, map[string]*tensor.Dense) {
	t.Helper()
	shapes := map[string][]int{}
	vals := map[string]*tensor.Dense{}
	for _, e := range fx.Extra {
		var s []int
		for _, d := range e.Shape {
			f, ok := d.(float64)
			if !ok {
				t.Fatalf("extra input %q has shape %v; want numbers", e.Name, e.Shape)
			}
			s = append(s, int(f))
		}
		shapes[e.Name] = s
		vals[e.Name] = denseOf(tensor.Float32, s, make([]float64, product(s)))
	}
	return shapes, vals
}

// foreignRecurrent is a recurrent fixture's "recurrent" entry.
type foreignRecurrent struct {
	StatePairs []struct {
		Input, Output string
		Shape         []any // sizes, and a name (or -1) for a dynamic batch
		BatchAxis     int   `json:"batch_axis"`
	} `json:"state_pairs"`
	SeqLens *struct {
		Input string
	} `json:"seq_lens"`
	EpisodeStarts *struct {
		Input string
	} `json:"episode_starts"`
}

// testForeignRecurrent steps each recorded sequence (NAME.seq_obs.npy [T, B, obs]) alone from
// a zero state, carrying the state outputs back into the state inputs (seq_lens ones,
// episode_starts zeros, extra inputs zeros), and compares every output the importer computes
// with PyTorch's (NAME.seq_<output>.npy, the sequences joined on each output's batch axis).
func testForeignRecurrent(t *testing.T, fx foreignFixture) {
	t.Helper()
	var rec foreignRecurrent
	if err := json.Unmarshal(fx.Recurrent, &rec); err != nil {
		t.Fatal(err)
	}
	_, m := fx.parse(t)
	if err := m.Check(fx.bound()...); err != nil {
		t.Fatalf("Check(%q): %v", fx.bound(), err)
	}
	seq := readForeignNPY(t, fx.name+".seq_obs.npy")
	steps, seqs := seq.Shape[0], seq.Shape[1]
	obsRow := seq.Len() / (steps * seqs)
	seqVals := npyFloats(seq)
	// Every input's concrete shape at batch 1, and its value between steps.
	shapes, extra := fx.extraShapes(t)
	state := map[string]string{} // state input → the output that feeds it next step
	fill := map[string]float64{}
	for _, sp := range rec.StatePairs {
		s := make([]int, len(sp.Shape))
		for k, d := range sp.Shape {
			if f, ok := d.(float64); ok && k != sp.BatchAxis {
				s[k] = int(f)
			}
		}
		s[sp.BatchAxis] = 1
		shapes[sp.Input], state[sp.Input] = s, sp.Output
	}
	if rec.SeqLens != nil {
		shapes[rec.SeqLens.Input], fill[rec.SeqLens.Input] = []int{1}, 1
	}
	if rec.EpisodeStarts != nil {
		shapes[rec.EpisodeStarts.Input] = []int{1}
	}
	obsName := ""
	for _, in := range m.Inputs() {
		if _, ok := shapes[in.Name]; ok {
			continue
		}
		if obsName != "" {
			t.Fatalf("inputs %q and %q are both unaccounted for", obsName, in.Name)
		}
		obsName = in.Name
		s := slices.Clone(in.Shape)
		s[0] = 1
		shapes[in.Name] = s
	}
	outs := slices.Clone(fx.bound())
	for _, o := range m.Outputs() {
		if !slices.Contains(outs, o) && m.Check(o) == nil {
			outs = append(outs, o)
		}
	}
	for _, o := range state {
		if !slices.Contains(outs, o) {
			t.Fatalf("state output %q cannot be computed: %v", o, m.Check(o))
		}
	}
	gr, err := m.BuildWith(G.NewGraph(), m.NewParams(), BuildOptions{Batch: 1, Outputs: outs, Shapes: shapes})
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(gr.ExprGraph())
	defer vm.Close()
	type recorded struct {
		vals      []float64
		shape     []int
		batchAxis int
	}
	want := map[string]recorded{}
	for _, o := range fx.Outputs {
		if o.SeqFile == "" || !slices.Contains(outs, o.Name) {
			continue
		}
		a := readForeignNPY(t, o.SeqFile)
		want[o.Name] = recorded{npyFloats(a), a.Shape, o.BatchAxis}
	}
	if len(want) == 0 {
		t.Fatal("no recorded sequence output to compare")
	}
	worst := map[string]float64{}
	for b := range seqs {
		vals := map[string][]float64{}
		for name, s := range shapes {
			v := make([]float64, product(s))
			for k := range v {
				v[k] = fill[name]
			}
			vals[name] = v
		}
		for step := range steps {
			base := (step*seqs + b) * obsRow
			vals[obsName] = seqVals[base : base+obsRow]
			var feeds []*tensor.Dense
			for _, in := range m.Inputs() {
				if e, ok := extra[in.Name]; ok {
					feeds = append(feeds, e)
					continue
				}
				feeds = append(feeds, denseOf(tensor.Float32, shapes[in.Name], vals[in.Name]))
			}
			res := runOnce(t, vm, gr, feeds...)
			got := map[string][]float64{}
			for k, name := range outs {
				got[name] = res[k]
			}
			for in, o := range state {
				vals[in] = got[o]
			}
			for name, r := range want {
				// The output at (step, sequence b): the recording's slice at step with the
				// output's batch axis at b.
				per := r.shape[1:]
				outer, inner := product(per[:r.batchAxis]), product(per[r.batchAxis+1:])
				for i := range outer {
					for j := range inner {
						w := r.vals[step*product(per)+(i*per[r.batchAxis]+b)*inner+j]
						worst[name] = math.Max(worst[name], relErr(got[name][i*inner+j], w))
					}
				}
			}
		}
	}
	for name, e := range worst {
		if e > 1e-5 {
			t.Errorf("%s: worst error vs PyTorch over %d steps of %d sequences %.3g > 1e-5", name, steps, seqs, e)
		}
		if testing.Verbose() {
			fmt.Printf("foreign %s %s: worst error vs PyTorch over %d steps × %d sequences %.3g\n", fx.name, name, steps, seqs, e)
		}
	}
}
