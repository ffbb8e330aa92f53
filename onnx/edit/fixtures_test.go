package edit

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// fixture is one export of testdata/gen.py, described by its NAME.json.
type fixture struct {
	name    string
	dir     string
	Batch   int    `json:"batch"`
	Rows    int    `json:"rows"`
	Expect  string `json:"expect"`
	Inputs  []port `json:"inputs"`
	Outputs []port `json:"outputs"`
}

type port struct {
	Name string `json:"name"`
	Axis int    `json:"axis"`
}

func loadFixtures(t *testing.T, dir string) []*fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s (%v)", dir, err)
	}
	var out []*fixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fx := &fixture{name: strings.TrimSuffix(filepath.Base(p), ".json"), dir: dir}
		if err := json.Unmarshal(data, fx); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, fx)
	}
	return out
}

func (fx *fixture) model(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fx.dir, fx.name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (fx *fixture) array(t testing.TB, name string) *npy.Array {
	t.Helper()
	a, err := npy.ReadFile(filepath.Join(fx.dir, fx.name+"."+name+".npy"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// values returns an array's elements as float64.
func values(a *npy.Array) []float64 {
	switch {
	case a.F32 != nil:
		return convert[float64](a.F32)
	case a.F64 != nil:
		return slices.Clone(a.F64)
	case a.I32 != nil:
		return convert[float64](a.I32)
	case a.I64 != nil:
		return convert[float64](a.I64)
	}
	return convert[float64](a.U8)
}

// inputs returns the fixture's inputs as Options.Inputs.
func (fx *fixture) inputs(t testing.TB) map[string][]float64 {
	in := map[string][]float64{}
	for _, p := range fx.Inputs {
		in[p.Name] = values(fx.array(t, p.Name))
	}
	return in
}

// TestDynamicBatchFixtures rewrites every fixed-batch export of testdata/gen.py and checks the
// result against PyTorch's outputs for all rows at once; the models that cannot be freed must
// fail with ErrFixedBatch saying why.
func TestDynamicBatchFixtures(t *testing.T) {
	reasons := map[string]string{
		"batch_mean": "reduces over the batch",
		"first_row":  "selects rows of the batch",
		"table8":     "does not reproduce the original",
	}
	for _, fx := range loadFixtures(t, "testdata") {
		t.Run(fx.name, func(t *testing.T) {
			model := fx.model(t)
			out, rep, err := DynamicBatch(context.Background(), model, Options{Inputs: fx.inputs(t), Rows: fx.Rows})
			t.Logf("%v", rep)
			switch fx.Expect {
			case "dynamic":
				if err != nil || !rep.Dynamic || !slices.Equal(out, model) {
					t.Fatalf("got report %+v, err %v; want the model back unchanged", rep, err)
				}
				return
			case "refuse", "mismatch":
				if !errors.Is(err, ErrFixedBatch) || !strings.Contains(err.Error(), reasons[fx.name]) {
					t.Fatalf("got %v, want ErrFixedBatch saying %q", err, reasons[fx.name])
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rep.Batch != fx.Batch || rep.Rows != fx.Rows || rep.MaxDiff > 1e-5 {
				t.Errorf("report %+v: want batch %d, %d rows, max difference ≤ 1e-5", rep, fx.Batch, fx.Rows)
			}
			for _, p := range fx.Inputs {
				if ax, ok := rep.Inputs[p.Name]; !ok || ax != p.Axis {
					t.Errorf("input %q: batch axis %d (found %v), want %d", p.Name, ax, ok, p.Axis)
				}
			}
			for _, p := range fx.Outputs {
				if ax, ok := rep.Outputs[p.Name]; !ok || ax != p.Axis {
					t.Errorf("output %q: batch axis %d (found %v), want %d", p.Name, ax, ok, p.Axis)
				}
			}
			checkPreserved(t, model, out, 0)
			checkPyTorch(t, fx, out)
		})
	}
}

// checkPyTorch runs the rewritten model on all the fixture's rows at once and compares every
// output with PyTorch's.
func checkPyTorch(t *testing.T, fx *fixture, model []byte) {
	t.Helper()
	in := map[string]*npy.Array{}
	inAxes, outAxes := map[string]int{}, map[string]int{}
	for _, p := range fx.Inputs {
		in[p.Name], inAxes[p.Name] = fx.array(t, p.Name), p.Axis
	}
	for _, p := range fx.Outputs {
		outAxes[p.Name] = p.Axis
	}
	got := runAll(t, model, in, inAxes, outAxes, fx.Rows)
	for _, p := range fx.Outputs {
		matchPyTorch(t, p.Name, fx.array(t, p.Name), got[p.Name], fx.Rows)
	}
}

func matchPyTorch(t *testing.T, name string, want *npy.Array, got *tensor, rows int) {
	t.Helper()
	if got == nil {
		t.Errorf("no output %q", name)
		return
	}
	d, bad := compare(givenTensor(got.dt, shape64(want.Shape), values(want)), got, 1e-5)
	if bad != "" {
		t.Errorf("output %q against PyTorch: %s", name, bad)
	}
	t.Logf("output %q: max |ONNX Runtime − PyTorch| = %.3g over %d rows", name, d, rows)
}

// runAll runs model on all rows at once. A model whose batch is on axis 0 everywhere goes
// through a dynamic onnx.Session, as a batcher would run it; others through a runner with the
// inputs' batch fixed at rows.
func runAll(t *testing.T, model []byte, in map[string]*npy.Array, inAxes, outAxes map[string]int, rows int) map[string]*tensor {
	t.Helper()
	axis0 := true
	for _, ax := range inAxes {
		axis0 = axis0 && ax == 0
	}
	for _, ax := range outAxes {
		axis0 = axis0 && ax == 0
	}
	feedAll := func(infos []onnx.TensorInfo) map[string]*tensor {
		feeds := map[string]*tensor{}
		for _, info := range infos {
			a, ok := in[info.Name]
			if !ok {
				t.Fatalf("no data for input %q", info.Name)
			}
			feeds[info.Name] = givenTensor(info.DType, shape64(a.Shape), values(a))
		}
		return feeds
	}
	if !axis0 {
		m, err := parse(model)
		if err != nil {
			t.Fatal(err)
		}
		r, err := openRunner(context.Background(), m, newIndex(m), inAxes, int64(rows), onnx.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.close()
		got, err := r.run(feedAll(r.inputs))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: rows})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.StaticBatch() {
		t.Fatal("the rewritten model still has a static batch")
	}
	feeds := feedAll(s.Inputs())
	for i, info := range s.Inputs() {
		if err := feed(s, i, feeds[info.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Run(rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tensor{}
	for i, info := range s.Outputs() {
		if !info.Batched {
			t.Errorf("output %q is not batched in the rewritten model", info.Name)
		}
		if got[info.Name], err = fetch(s, i, info, rows); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func shape64(s []int) []int64 {
	out := make([]int64, len(s))
	for k, d := range s {
		out[k] = int64(d)
	}
	return out
}

// checkPreserved checks that an edit kept the graph's names, opset, metadata, initializer
// values and node order, and changed no node's operator; exposed is the number of outputs
// the edit appended.
func checkPreserved(t *testing.T, before, after []byte, exposed int) {
	t.Helper()
	var a, b onnxpb.ModelProto
	if err := proto.Unmarshal(before, &a); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(after, &b); err != nil {
		t.Fatal(err)
	}
	names := func(vis []*onnxpb.ValueInfoProto) []string {
		var out []string
		for _, vi := range vis {
			out = append(out, vi.GetName())
		}
		return out
	}
	ga, gb := a.GetGraph(), b.GetGraph()
	outs := names(gb.GetOutput())
	if len(outs) != len(ga.GetOutput())+exposed {
		t.Errorf("%d outputs, want %d", len(outs), len(ga.GetOutput())+exposed)
	}
	if !slices.Equal(names(ga.GetInput()), names(gb.GetInput())) || !slices.Equal(names(ga.GetOutput()), outs[:min(len(outs), len(ga.GetOutput()))]) {
		t.Errorf("inputs/outputs changed: %v %v → %v %v", names(ga.GetInput()), names(ga.GetOutput()), names(gb.GetInput()), names(gb.GetOutput()))
	}
	if !proto.Equal(&onnxpb.ModelProto{OpsetImport: a.OpsetImport, MetadataProps: a.MetadataProps, IrVersion: a.IrVersion},
		&onnxpb.ModelProto{OpsetImport: b.OpsetImport, MetadataProps: b.MetadataProps, IrVersion: b.IrVersion}) {
		t.Error("opset, IR version or metadata changed")
	}
	if len(ga.GetInitializer()) != len(gb.GetInitializer()) {
		t.Errorf("%d initializers, was %d", len(gb.GetInitializer()), len(ga.GetInitializer()))
	}
	for k, init := range ga.GetInitializer() {
		if k < len(gb.GetInitializer()) && !isIntType(init.GetDataType()) && !proto.Equal(init, gb.GetInitializer()[k]) {
			t.Errorf("initializer %q changed", init.GetName())
		}
	}
	// The original nodes keep their order and operators (new nodes may sit between them).
	j := 0
	for _, n := range gb.GetNode() {
		if j < len(ga.GetNode()) && n.GetName() == ga.GetNode()[j].GetName() && slices.Equal(n.GetOutput(), ga.GetNode()[j].GetOutput()) {
			if n.GetOpType() != ga.GetNode()[j].GetOpType() {
				t.Errorf("node %q changed operator", n.GetName())
			}
			j++
		}
	}
	if j != len(ga.GetNode()) {
		t.Errorf("only %d of the %d original nodes kept their order", j, len(ga.GetNode()))
	}
}
