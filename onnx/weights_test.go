package onnx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// mlpWeights are the float32 initializers of testdata/mlp_tanh.onnx (its tied biases are
// Identity nodes reading critic.0.bias).
var mlpWeights = []string{"critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.4.weight", "critic.4.bias",
	"actor.0.weight", "actor.2.weight", "actor.4.weight", "actor.4.bias"}

func readModel(t testing.TB, name string) (*onnxpb.ModelProto, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(data, m); err != nil {
		t.Fatal(err)
	}
	return m, data
}

// withValues returns m serialised with the named initializers set to vals (raw data): the
// constant-weight model a fed session must match.
func withValues(t testing.TB, m *onnxpb.ModelProto, names []string, vals [][]float32) []byte {
	t.Helper()
	m = proto.Clone(m).(*onnxpb.ModelProto)
	for _, init := range m.GetGraph().GetInitializer() {
		if k := slices.Index(names, init.GetName()); k >= 0 {
			raw := make([]byte, 4*len(vals[k]))
			for j, v := range vals[k] {
				binary.LittleEndian.PutUint32(raw[4*j:], math.Float32bits(v))
			}
			init.RawData, init.FloatData = raw, nil
		}
	}
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func newSession(t testing.TB, model []byte, cfg Config) *Session {
	t.Helper()
	s, err := New(context.Background(), model, cfg)
	return closedAtEnd(t, s, err)
}

// outputsOf runs s on batch rows of obs and returns copies of its outputs.
func outputsOf(t testing.TB, s *Session, obs []float32, batch int) [][]float32 {
	t.Helper()
	in, err := Input[float32](s, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(in, obs[:batch*s.Inputs()[0].RowSize()])
	if err := s.Run(batch); err != nil {
		t.Fatal(err)
	}
	var outs [][]float32
	for k, info := range s.Outputs() {
		out, err := Output[float32](s, k)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, slices.Clone(out[:batch*info.RowSize()]))
	}
	return outs
}

func maxDiff(a, b [][]float32) float64 {
	worst := 0.0
	for i := range a {
		for j := range a[i] {
			worst = math.Max(worst, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return worst
}

// perturbed returns a copy of vals with every element moved by up to ±scale.
func perturbed(vals [][]float32, rng *rand.Rand, scale float32) [][]float32 {
	out := make([][]float32, len(vals))
	for i, v := range vals {
		out[i] = make([]float32, len(v))
		for j, x := range v {
			out[i][j] = x + scale*(2*rng.Float32()-1)
		}
	}
	return out
}

// TestFedWeights: a session feeding the MLP's initializers computes what the model computes
// with its own values, then, after new values are written into a set and that set is used,
// what a constant-weight session of a model holding those values computes (to 1e-6), at
// every batch size seen before and after the switch, switching back and forth.
func TestFedWeights(t *testing.T) {
	m, data := readModel(t, "mlp_tanh")
	defaults, err := WeightValues(data, mlpWeights)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	obs := make([]float32, 64*4)
	for i := range obs {
		obs[i] = 2*rng.Float32() - 1
	}
	fed := newSession(t, data, Config{MaxBatch: 64, Weights: mlpWeights})
	if got := fed.Weights(); len(got) != len(mlpWeights) || got[2].Name != "critic.2.weight" || !slices.Equal(got[2].Row, []int64{64, 64}) || got[2].Batched {
		t.Fatalf("Weights() = %v", got)
	}
	if ins := fed.Inputs(); len(ins) != 1 || ins[0].Name != "obs" {
		t.Fatalf("inputs %v: fed weights are not the session's inputs", ins)
	}
	plain := newSession(t, data, Config{MaxBatch: 64})
	for _, batch := range []int{1, 7, 64} {
		if d := maxDiff(outputsOf(t, plain, obs, batch), outputsOf(t, fed, obs, batch)); d > 1e-6 {
			t.Fatalf("batch %d, no set used: differs from the model by %g", batch, d)
		}
	}
	a, err := fed.NewWeights(perturbed(defaults, rng, 0)) // the model's values
	if err != nil {
		t.Fatal(err)
	}
	newVals := perturbed(defaults, rng, 0.3)
	b, err := fed.NewWeights(perturbed(defaults, rng, 0)) // written below, as a trainer would
	if err != nil {
		t.Fatal(err)
	}
	for i, buf := range b.Buffers() {
		copy(buf, newVals[i])
	}
	ref := newSession(t, withValues(t, m, mlpWeights, newVals), Config{MaxBatch: 64})
	for round := range 2 {
		for _, set := range []struct {
			name string
			w    *Weights
			want *Session
		}{{"A (the model's values)", a, plain}, {"B (new values)", b, ref}} {
			if err := fed.UseWeights(set.w); err != nil {
				t.Fatal(err)
			}
			for _, batch := range []int{1, 7, 64, 3} {
				if d := maxDiff(outputsOf(t, set.want, obs, batch), outputsOf(t, fed, obs, batch)); d > 1e-6 {
					t.Errorf("round %d, set %s, batch %d: max difference %g from the constant-weight session", round, set.name, batch, d)
				}
			}
		}
	}
	if d := maxDiff(outputsOf(t, plain, obs, 64), outputsOf(t, ref, obs, 64)); d < 1e-3 {
		t.Fatalf("the new values change the outputs by only %g: the test would not see a stale set", d)
	}
	// Writing the set in use changes the next Run: the session reads the caller's memory.
	for i, buf := range a.Buffers() {
		copy(buf, newVals[i])
	}
	if err := fed.UseWeights(a); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(outputsOf(t, ref, obs, 7), outputsOf(t, fed, obs, 7)); d > 1e-6 {
		t.Errorf("after rewriting set A in place: max difference %g", d)
	}
}

// TestFedWeightsOldIR: a model of IR version 3 (every initializer also a graph input, held
// constant by ONNX Runtime) can feed its weights: the session raises it to IR 4.
func TestFedWeightsOldIR(t *testing.T) {
	m, _ := readModel(t, "mlp_tanh")
	m.IrVersion = proto.Int64(3)
	m.OpsetImport[0].Version = proto.Int64(8) // IR 3's opsets: Gemm and Tanh compute the same
	for _, init := range m.GetGraph().GetInitializer() {
		m.Graph.Input = append(m.Graph.Input, &onnxpb.ValueInfoProto{Name: init.Name, Type: &onnxpb.TypeProto{
			Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: init.DataType, Shape: fixedShape(init.Dims)}}}})
	}
	old, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	defaults, err := WeightValues(old, mlpWeights)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	vals := perturbed(defaults, rng, 0.3)
	fed := newSession(t, old, Config{MaxBatch: 8, Weights: mlpWeights})
	w, err := fed.NewWeights(vals)
	if err != nil {
		t.Fatal(err)
	}
	if err := fed.UseWeights(w); err != nil {
		t.Fatal(err)
	}
	obs := make([]float32, 8*4)
	for i := range obs {
		obs[i] = 2*rng.Float32() - 1
	}
	ref := newSession(t, withValues(t, m, mlpWeights, vals), Config{MaxBatch: 8})
	if d := maxDiff(outputsOf(t, ref, obs, 8), outputsOf(t, fed, obs, 8)); d > 1e-6 {
		t.Errorf("max difference %g from the constant-weight session", d)
	}
}

// TestFedWeightsAllocateNothing: once each batch size has run with the set in use, Run with
// fed weights allocates nothing. (Switching sets rebinds each weight at each batch size's
// next Run, which allocates one small object per weight in onnxruntime_go's BindInput: a
// cost per publish, not per step.)
func TestFedWeightsAllocateNothing(t *testing.T) {
	_, data := readModel(t, "mlp_tanh")
	defaults, err := WeightValues(data, mlpWeights)
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, data, Config{MaxBatch: 64, Weights: mlpWeights})
	for i := range 2 {
		w, err := s.NewWeights(perturbed(defaults, rand.New(rand.NewPCG(1, uint64(i))), 0.1))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.UseWeights(w); err != nil {
			t.Fatal(err)
		}
		run := func() {
			for _, batch := range []int{1, 64} {
				if err := s.Run(batch); err != nil {
					t.Fatal(err)
				}
			}
		}
		run()
		if a := testing.AllocsPerRun(50, run); a != 0 {
			t.Errorf("set %d: %v allocations per Run of batches 1 and 64, want 0", i, a)
		}
	}
}

// TestFedWeightsErrors: names that cannot be fed, and sets that do not fit, are errors that
// say which; nothing panics.
func TestFedWeightsErrors(t *testing.T) {
	ctx := context.Background()
	m, data := readModel(t, "mlp_tanh")
	// Add an int64 initializer and a float scalar to name.
	m.Graph.Initializer = append(m.Graph.Initializer,
		&onnxpb.TensorProto{Name: proto.String("steps"), DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Dims: []int64{1}, Int64Data: []int64{3}},
		&onnxpb.TensorProto{Name: proto.String("scale"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: []float32{2}})
	extra, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		model []byte
		names []string
		is    error
		want  string
	}{
		{"unknown", data, []string{"actor.0.weight", "actor.9.weight"}, ErrInput, `"actor.9.weight", which is not an initializer`},
		{"an input", data, []string{"obs"}, ErrInput, `"obs", which is not an initializer`},
		{"an Identity's output", data, []string{"actor.0.bias"}, ErrInput, `"actor.0.bias", which is not an initializer`},
		{"twice", data, []string{"actor.0.weight", "actor.0.weight"}, ErrConfig, "twice"},
		{"int64", extra, []string{"steps"}, ErrDType, "INT64"},
		{"scalar", extra, []string{"scale"}, ErrShape, "scalar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(ctx, tc.model, Config{Weights: tc.names})
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %v containing %q", err, tc.is, tc.want)
			}
		})
	}

	defaults, err := WeightValues(data, mlpWeights)
	if err != nil {
		t.Fatal(err)
	}
	fed := newSession(t, data, Config{Weights: mlpWeights})
	other := newSession(t, data, Config{Weights: mlpWeights})
	plain := newSession(t, data, Config{})
	short := slices.Clone(defaults)
	short[3] = short[3][1:]
	foreign, err := other.NewWeights(defaults)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		is   error
		want string
	}{
		{"one buffer missing", second(fed.NewWeights(defaults[1:])), ErrShape, "8 weight buffers for the 9"},
		{"a buffer too short", second(fed.NewWeights(short)), ErrShape, `"critic.4.weight" has shape [1 64] (64 elements), its buffer holds 63`},
		{"no fed weights", second(plain.NewWeights(defaults)), ErrConfig, "feeds no weights"},
		{"another session's set", fed.UseWeights(foreign), ErrConfig, "a set this session made"},
		{"nil set", fed.UseWeights(nil), ErrConfig, "a set this session made"},
	} {
		if !errors.Is(tc.err, tc.is) || !strings.Contains(fmt.Sprint(tc.err), tc.want) {
			t.Errorf("%s: error %v, want %v containing %q", tc.name, tc.err, tc.is, tc.want)
		}
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.NewWeights(defaults); !errors.Is(err, ErrClosed) {
		t.Errorf("NewWeights after Close: %v, want ErrClosed", err)
	}
	if err := other.UseWeights(foreign); !errors.Is(err, ErrClosed) {
		t.Errorf("UseWeights after Close: %v, want ErrClosed", err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestWeightValues reads initializers stored as raw data and as float_data, and refuses a
// name the model lacks.
func TestWeightValues(t *testing.T) {
	m, _ := readModel(t, "mlp_tanh")
	want := [][]float32{{1.5, -2.25}, {0.125}}
	m.Graph.Initializer = append(m.Graph.Initializer,
		&onnxpb.TensorProto{Name: proto.String("raw"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{2},
			RawData: []byte{0, 0, 0xc0, 0x3f, 0, 0, 0x10, 0xc0}},
		&onnxpb.TensorProto{Name: proto.String("listed"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: []int64{1, 1},
			FloatData: []float32{0.125}})
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := WeightValues(data, []string{"raw", "listed"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("WeightValues = %v, want %v", got, want)
	}
	if _, err := WeightValues(data, []string{"nope"}); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown name: %v", err)
	}
}
