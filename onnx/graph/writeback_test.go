package graph

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// ortRun runs a serialized model on ONNX Runtime for the given input and returns its outputs.
func ortRun(t testing.TB, model []byte, in *npy.Array) [][]float32 {
	t.Helper()
	s, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: in.Shape[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shape := make([]int64, len(in.Shape))
	for k, d := range in.Shape {
		shape[k] = int64(d)
	}
	n, err := onnx.Feed(s, 0, shape, in.F32)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(n); err != nil {
		t.Fatal(err)
	}
	var outs [][]float32
	for k, info := range s.Outputs() {
		o, err := onnx.Output[float32](s, k)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, slices.Clone(o[:n*info.RowSize()]))
	}
	return outs
}

func unmarshal(t testing.TB, data []byte) *onnxpb.ModelProto {
	t.Helper()
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	return &mp
}

// TestWriteBackUnchanged writes unchanged weights back: ONNX Runtime's outputs on the written
// model equal those on the original bit for bit, and names, opset and metadata are kept.
func TestWriteBackUnchanged(t *testing.T) {
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			orig := readFile(t, fx.name+".onnx")
			m, err := Parse(orig)
			if err != nil {
				t.Fatal(err)
			}
			data, err := m.WriteBack(m.NewParams(), WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			in := readNPY(t, fx.name+".input.npy")
			want, got := ortRun(t, orig, in), ortRun(t, data, in)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ONNX Runtime outputs differ (-original +written):\n%s", diff)
			}
			a, b := unmarshal(t, orig), unmarshal(t, data)
			if diff := cmp.Diff(a.GetOpsetImport(), b.GetOpsetImport(), cmp.Comparer(proto.Equal)); diff != "" {
				t.Errorf("opset imports differ:\n%s", diff)
			}
			if diff := cmp.Diff(a.GetMetadataProps(), b.GetMetadataProps(), cmp.Comparer(proto.Equal)); diff != "" {
				t.Errorf("metadata differs:\n%s", diff)
			}
			if a.GetIrVersion() != b.GetIrVersion() || a.GetProducerName() != b.GetProducerName() {
				t.Errorf("ir_version/producer %d/%q, want %d/%q", b.GetIrVersion(), b.GetProducerName(), a.GetIrVersion(), a.GetProducerName())
			}
			names := func(vs []*onnxpb.ValueInfoProto) (out []string) {
				for _, v := range vs {
					out = append(out, v.GetName())
				}
				return out
			}
			if !slices.Equal(names(a.GetGraph().GetInput()), names(b.GetGraph().GetInput())) ||
				!slices.Equal(names(a.GetGraph().GetOutput()), names(b.GetGraph().GetOutput())) {
				t.Errorf("graph inputs/outputs changed")
			}
			// Every original initializer is still there with its dims and type; the untied
			// Identity nodes became initializers; every other node is unchanged.
			inits := map[string]*onnxpb.TensorProto{}
			for _, ti := range b.GetGraph().GetInitializer() {
				inits[ti.GetName()] = ti
			}
			for _, ti := range a.GetGraph().GetInitializer() {
				w, ok := inits[ti.GetName()]
				if !ok || !slices.Equal(w.GetDims(), ti.GetDims()) || w.GetDataType() != ti.GetDataType() {
					t.Errorf("initializer %q lost or changed", ti.GetName())
				}
			}
			var kept []*onnxpb.NodeProto
			for _, n := range a.GetGraph().GetNode() {
				if n.GetOpType() == "Identity" && inits[n.GetOutput()[0]] != nil {
					continue
				}
				kept = append(kept, n)
			}
			if diff := cmp.Diff(kept, b.GetGraph().GetNode(), cmp.Comparer(proto.Equal)); diff != "" {
				t.Errorf("nodes differ:\n%s", diff)
			}
			if len(b.GetGraph().GetInitializer()) != len(a.GetGraph().GetInitializer())+len(m.Untied()) {
				t.Errorf("%d initializers, want %d + %d untied", len(b.GetGraph().GetInitializer()), len(a.GetGraph().GetInitializer()), len(m.Untied()))
			}
		})
	}
}

// perturb changes every parameter in place by a few percent plus a small offset.
func perturb(p *Params, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, name := range p.Names() {
		v, _ := p.Value(name)
		data := v.Data().([]float32)
		for k := range data {
			data[k] = data[k]*float32(1+0.1*rng.NormFloat64()) + float32(0.02*rng.NormFloat64())
		}
	}
}

// TestWriteBackPerturbed changes every weight, writes the model back, and compares ONNX
// Runtime's outputs on it with the gorgonia forward pass over the same weights.
func TestWriteBackPerturbed(t *testing.T) {
	const tol = 1e-5
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			m := parse(t, fx.name)
			p := m.NewParams()
			perturb(p, 42)
			data, err := m.WriteBack(p, WriteOptions{BumpVersion: true})
			if err != nil {
				t.Fatal(err)
			}
			in := readNPY(t, fx.name+".input.npy")
			got := ortRun(t, data, in)
			gr, err := m.Build(newGraph(), p, in.Shape[0])
			if err != nil {
				t.Fatal(err)
			}
			want := forward(t, gr, firstRows(in, in.Shape[0], tensor.Float32))
			for k, name := range fx.outputs {
				d := maxAbsDiff(want[k], got[k])
				if testing.Verbose() {
					fmt.Printf("writeback %s %s: max abs error ORT vs gorgonia %.3g\n", fx.name, name, d)
				}
				if d > tol {
					t.Errorf("output %q: max abs error %.3g > %g", name, d, tol)
				}
			}
			if md := unmarshal(t, data).GetMetadataProps(); fx.name == "mlp_tanh" {
				for _, kv := range md {
					if kv.GetKey() == VersionKey && kv.GetValue() != "1" {
						t.Errorf("towerrl.version %q after a bump from 0, want 1", kv.GetValue())
					}
				}
			}
		})
	}
}

// TestWriteBackUntied changes only one of the biases torch deduplicated into one initializer
// (actor.0.bias, an Identity of critic.0.bias): ONNX Runtime on the written model matches
// gorgonia, the actor's output moves and the critic's does not.
func TestWriteBackUntied(t *testing.T) {
	m := parse(t, "mlp_tanh")
	if diff := cmp.Diff(map[string]string{"actor.0.bias": "critic.0.bias", "actor.2.bias": "critic.0.bias", "critic.2.bias": "critic.0.bias"}, m.Untied()); diff != "" {
		t.Fatalf("untied parameters (-want +got):\n%s", diff)
	}
	in := readNPY(t, "mlp_tanh.input.npy")
	p := m.NewParams()
	orig := ortRun(t, readFile(t, "mlp_tanh.onnx"), in)
	v, _ := p.Value("actor.0.bias")
	for k, data := 0, v.Data().([]float32); k < len(data); k++ {
		data[k] += 0.5 * float32(k%3-1)
	}
	data, err := m.WriteBack(p, WriteOptions{Version: "7"})
	if err != nil {
		t.Fatal(err)
	}
	got := ortRun(t, data, in)
	gr, err := m.Build(newGraph(), p, in.Shape[0])
	if err != nil {
		t.Fatal(err)
	}
	want := forward(t, gr, firstRows(in, in.Shape[0], tensor.Float32))
	for k := range want {
		if d := maxAbsDiff(want[k], got[k]); d > 1e-5 {
			t.Errorf("output %d: ORT vs gorgonia max abs error %.3g", k, d)
		}
	}
	if d := maxAbsDiff(want[0], orig[0]); d < 1e-4 {
		t.Errorf("logits moved by %.3g only after changing actor.0.bias", d)
	}
	if !slices.Equal(got[1], orig[1]) {
		t.Errorf("value changed after changing actor.0.bias alone")
	}
	if md := (&Model{proto: unmarshal(t, data)}).Metadata(); md[VersionKey] != "7" {
		t.Errorf("towerrl.version %q, want 7", md[VersionKey])
	}
	// The written model imports again, now without untied parameters, with the same values.
	m2, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(m2.Untied()) != 0 {
		t.Errorf("re-imported model has untied parameters %v", m2.Untied())
	}
	p2 := m2.NewParams()
	for _, name := range p.Names() {
		a, _ := p.Value(name)
		b, ok := p2.Value(name)
		if !ok || !slices.Equal(a.Data().([]float32), b.Data().([]float32)) {
			t.Errorf("parameter %q differs after the round trip", name)
		}
	}
}
