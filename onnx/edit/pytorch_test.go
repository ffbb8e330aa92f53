package edit_test

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

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// pytorchDir holds what scripts/back_to_pytorch.py committed: policies towerrl fine-tuned from
// the foreign fixtures, and the outputs of the exporter's PyTorch module after it loaded each
// one's initializers back with load_state_dict(strict=True) (docs/pytorch.md).
const pytorchDir = "../../testdata/pytorch"

// repoRoot is where the fixtures' paths in NAME.json start.
const repoRoot = "../.."

// backToPyTorch is the part of a testdata/pytorch/NAME.json this test reads.
type backToPyTorch struct {
	name          string
	Fixture       string   `json:"fixture"`
	Prefix        string   `json:"prefix"`
	StateDictKeys []string `json:"state_dict_keys"`
	InputFile     string   `json:"input_file"`
	Rows          int      `json:"rows"`
	Outputs       []struct {
		Name string `json:"name"`
		File string `json:"file"`
	} `json:"outputs"`
	Inner *struct {
		Tensor string `json:"tensor"`
		File   string `json:"file"`
	} `json:"inner"`
	Tolerance float64 `json:"tolerance"`
}

// TestBackToPyTorch checks, with no Python, what the back-to-PyTorch script showed: the policy
// towerrl fine-tuned keeps the fixture's parameters (names, shapes, types) with new values,
// exactly the keys the PyTorch module loaded strictly; and towerrl's inference of it (ONNX
// Runtime, a fixed batch run one row at a time as the tools run it) gives the reloaded module's
// outputs, the inner logits or mean included, within float32 rounding.
func TestBackToPyTorch(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(pytorchDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases in %s (%v): run /usr/bin/python3 scripts/back_to_pytorch.py", pytorchDir, err)
	}
	for _, p := range paths {
		c := readBackToPyTorch(t, p)
		t.Run(c.name, func(t *testing.T) {
			tuned := readFile(t, filepath.Join(pytorchDir, c.name+".onnx"))
			fixture := readFile(t, filepath.Join(repoRoot, c.Fixture))
			checkKeptNames(t, c, tuned, fixture)
			checkAgainstPyTorch(t, c, tuned)
		})
	}
}

func readBackToPyTorch(t *testing.T, path string) *backToPyTorch {
	t.Helper()
	c := &backToPyTorch{name: strings.TrimSuffix(filepath.Base(path), ".json")}
	if err := json.Unmarshal(readFile(t, path), c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if c.Fixture == "" || c.InputFile == "" || len(c.Outputs) == 0 || c.Tolerance <= 0 {
		t.Fatalf("%s: want fixture, input_file, outputs and a tolerance; got %+v", path, c)
	}
	return c
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// initializerInfo is an initializer's name, element type and dims.
type initializerInfo struct {
	name string
	kind int32
	dims string
}

// initializers lists a model's initializers by name, and each Identity node reading one: PyTorch's
// exporter shares one initializer among parameters of equal value (zero biases) and names the
// others as Identity outputs. from maps each name to the initializer its value is read from.
func initializers(t *testing.T, model []byte) (infos []initializerInfo, from map[string]string) {
	t.Helper()
	var m onnxpb.ModelProto
	if err := proto.Unmarshal(model, &m); err != nil {
		t.Fatal(err)
	}
	byName, from := map[string]initializerInfo{}, map[string]string{}
	for _, in := range m.GetGraph().GetInitializer() {
		info := initializerInfo{in.GetName(), in.GetDataType(), fmt.Sprint(in.GetDims())}
		byName[info.name], from[info.name] = info, info.name
		infos = append(infos, info)
	}
	for _, n := range m.GetGraph().GetNode() {
		if n.GetOpType() != "Identity" || len(n.GetInput()) != 1 || len(n.GetOutput()) != 1 {
			continue
		}
		if src, ok := byName[n.GetInput()[0]]; ok {
			infos = append(infos, initializerInfo{n.GetOutput()[0], src.kind, src.dims})
			from[n.GetOutput()[0]] = src.name
		}
	}
	slices.SortFunc(infos, func(a, b initializerInfo) int { return strings.Compare(a.name, b.name) })
	return infos, from
}

// checkKeptNames: the fine-tuned graph's initializers are the fixture's parameters (an
// Identity-shared one under its own name), with their types and shapes, and nothing reads them
// through an Identity any more; they are exactly the keys PyTorch loaded with strict=True (the
// module's whole state_dict, the export wrapper's prefix put back); and fine-tuning changed some
// of them, or the comparison with PyTorch below would only re-check the fixture.
func checkKeptNames(t *testing.T, c *backToPyTorch, tuned, fixture []byte) {
	t.Helper()
	got, tunedFrom := initializers(t, tuned)
	want, fixtureFrom := initializers(t, fixture)
	if !slices.Equal(got, want) {
		t.Fatalf("parameters of the fine-tuned policy:\n%v\nwant the fixture's:\n%v", got, want)
	}
	names := make([]string, len(got))
	for i, in := range got {
		names[i] = in.name
		if tunedFrom[in.name] != in.name {
			t.Errorf("the fine-tuned policy still reads %q through an Identity of %q", in.name, tunedFrom[in.name])
		}
	}
	var loaded []string
	for _, k := range c.StateDictKeys {
		loaded = append(loaded, c.Prefix+k)
	}
	if !slices.Equal(names, slices.Sorted(slices.Values(loaded))) {
		t.Errorf("initializers %v, but PyTorch loaded %v (prefix %q)", names, loaded, c.Prefix)
	}
	sources := make([]string, len(names))
	for i, n := range names {
		sources[i] = fixtureFrom[n]
	}
	before, err := onnx.WeightValues(fixture, sources)
	if err != nil {
		t.Fatal(err)
	}
	after, err := onnx.WeightValues(tuned, names)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i := range names {
		if !slices.Equal(before[i], after[i]) {
			changed++
		}
	}
	if changed == 0 {
		t.Errorf("fine-tuning changed none of the %d initializers", len(names))
	}
	t.Logf("%d parameters kept by name, %d of them changed by fine-tuning; PyTorch loaded all %d strictly",
		len(names), changed, len(loaded))
}

// checkAgainstPyTorch runs the fine-tuned policy (its inner tensor exposed as an extra output)
// on the committed rows and compares every output with the reloaded PyTorch module's.
func checkAgainstPyTorch(t *testing.T, c *backToPyTorch, tuned []byte) {
	t.Helper()
	model, files := tuned, [][2]string{} // {tensor, file}
	for _, o := range c.Outputs {
		files = append(files, [2]string{o.Name, o.File})
	}
	if c.Inner != nil {
		var err error
		if model, err = edit.Expose(tuned, c.Inner.Tensor); err != nil {
			t.Fatal(err)
		}
		files = append(files, [2]string{c.Inner.Tensor, c.Inner.File})
	}
	in, err := npy.ReadFile(filepath.Join(pytorchDir, c.InputFile))
	if err != nil {
		t.Fatal(err)
	}
	if in.F32 == nil || len(in.Shape) != 2 || in.Shape[0] != c.Rows {
		t.Fatalf("%s: want float32 [%d, obs], got %s %v", c.InputFile, c.Rows, in.Descr, in.Shape)
	}
	got := runRows(t, model, in)
	for _, f := range files {
		name, file := f[0], f[1]
		want, err := npy.ReadFile(filepath.Join(pytorchDir, file))
		if err != nil {
			t.Fatal(err)
		}
		d, bad := closeTo(got[name], want, c.Tolerance)
		if bad != "" {
			t.Errorf("output %q against PyTorch (%s): %s", name, file, bad)
			continue
		}
		t.Logf("output %q: max |ONNX Runtime − PyTorch| = %.3g over %d rows", name, d, c.Rows)
	}
}

// runRows runs model on every row of in and returns each output's rows joined, as float64: all
// rows at once where the batch is dynamic, else one fixed batch of one row at a time (as
// bin/infer and bin/eval run such a graph unless they rewrite it).
func runRows(t *testing.T, model []byte, in *npy.Array) map[string][]float64 {
	t.Helper()
	rows, width := in.Shape[0], in.Shape[1]
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: rows})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	step := rows
	if s.StaticBatch() {
		step = 1
	}
	out := map[string][]float64{}
	for r := 0; r < rows; r += step {
		n, err := onnx.Feed(s, 0, []int64{int64(step), int64(width)}, in.F32[r*width:(r+step)*width])
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(n); err != nil {
			t.Fatal(err)
		}
		for i, info := range s.Outputs() {
			size := info.RowSize()
			if info.Batched {
				size *= n
			}
			vals, err := outputFloat64(s, i, info.DType, size)
			if err != nil {
				t.Fatalf("output %q: %v", info.Name, err)
			}
			out[info.Name] = append(out[info.Name], vals...)
		}
	}
	return out
}

func outputFloat64(s *onnx.Session, i int, dt onnx.DType, n int) ([]float64, error) {
	switch dt {
	case onnx.Float32:
		return asFloat64[float32](s, i, n)
	case onnx.Int64:
		return asFloat64[int64](s, i, n)
	}
	return nil, fmt.Errorf("element type %s: this test reads float32 and int64 outputs", dt)
}

func asFloat64[T float32 | int64](s *onnx.Session, i, n int) ([]float64, error) {
	b, err := onnx.Output[T](s, i)
	if err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for k, v := range b[:n] {
		out[k] = float64(v)
	}
	return out, nil
}

// closeTo compares ONNX Runtime's values with PyTorch's: integers (actions) exactly, floats
// within tol·max(1, |PyTorch|). It returns the largest absolute difference, and what is wrong.
func closeTo(got []float64, want *npy.Array, tol float64) (float64, string) {
	var ref []float64
	exact := false
	switch {
	case want.F32 != nil:
		for _, v := range want.F32 {
			ref = append(ref, float64(v))
		}
	case want.I64 != nil:
		exact = true
		for _, v := range want.I64 {
			ref = append(ref, float64(v))
		}
	default:
		return 0, fmt.Sprintf("PyTorch's array is %s; want float32 or int64", want.Descr)
	}
	if len(got) != len(ref) {
		return 0, fmt.Sprintf("%d values, PyTorch has %d (shape %v)", len(got), len(ref), want.Shape)
	}
	worst := 0.0
	for k := range ref {
		d := math.Abs(got[k] - ref[k])
		worst = max(worst, d)
		if exact && d != 0 || !exact && !(d <= tol*max(1, math.Abs(ref[k]))) {
			return worst, fmt.Sprintf("value %d: ONNX Runtime %v, PyTorch %v", k, got[k], ref[k])
		}
	}
	return worst, ""
}
