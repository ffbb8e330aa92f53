package layout

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// openExposed exposes the binding's tensors in a copy of m (checking that m is left as it
// was) and opens the result in ONNX Runtime for one row a run; the session closes with the
// test.
func openExposed(t *testing.T, m *onnxpb.ModelProto, b Binding) (*onnx.Session, Binding) {
	t.Helper()
	before := proto.Clone(m)
	exposed, eb, err := Expose(m, b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, m) {
		t.Fatal("Expose modified its input")
	}
	data, err := proto.Marshal(exposed)
	if err != nil {
		t.Fatal(err)
	}
	s, err := onnx.New(context.Background(), data, onnx.Config{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, eb
}

// session opens the exposed model and runs one observation; the original outputs must keep
// their places.
func session(t *testing.T, m *onnxpb.ModelProto, b Binding, obs []float32) (*onnx.Session, Binding) {
	t.Helper()
	s, eb := openExposed(t, m, b)
	in, err := onnx.Input[float32](s, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(in, obs)
	if err := s.Run(1); err != nil {
		t.Fatal(err)
	}
	for i, o := range m.GetGraph().GetOutput() {
		if got := s.Outputs()[i].Name; got != o.GetName() {
			t.Errorf("output %d is %q, was %q", i, got, o.GetName())
		}
	}
	return s, eb
}

// tensors is a session's description of its tensors as package head reads them.
func tensors(infos []onnx.TensorInfo) []head.Tensor {
	out := make([]head.Tensor, len(infos))
	for i, t := range infos {
		out[i] = head.Tensor{Name: t.Name, DType: head.DType(t.DType.String()), Declared: t.Declared, Batched: t.Batched, Row: t.Row}
	}
	return out
}

func output(t *testing.T, s *onnx.Session, name string) []float32 {
	t.Helper()
	i, err := s.OutputIndex(name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := onnx.Output[float32](s, i)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SB3's discrete export: the exposed logits' argmax is the graph's own action, and head.Bind
// over the session's outputs gives a full categorical head.
func TestExposeLogits(t *testing.T) {
	m := sb3Discrete(3)
	env := head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{4}}
	b, err := Recognise(m, nil, env, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s, eb := session(t, m, b, []float32{0.3, -1.2, 0.8, 2})
	if eb.Params != b.Params || len(s.Outputs()) != 4 {
		t.Fatalf("exposed %+v, outputs %v", eb, s.Outputs())
	}
	outs, err := head.Bind(eb.Spec(env), tensors(s.Outputs()), eb.Names())
	if err != nil || outs.DeterministicOnly || outs.Params != 3 || outs.Value != 1 || outs.Actions != 0 {
		t.Fatalf("head.Bind: %+v %v", outs, err)
	}
	logits := output(t, s, eb.Params)
	acts, err := onnx.Output[int64](s, 0)
	if err != nil {
		t.Fatal(err)
	}
	argmax := 0
	for k, l := range logits[:3] {
		if l > logits[argmax] {
			argmax = k
		}
	}
	if int64(argmax) != acts[0] {
		t.Errorf("exposed logits %v: argmax %d, the graph's action %d", logits[:3], argmax, acts[0])
	}
	// The graph's log-probability output is log softmax of the exposed logits at the action.
	lp := make([]float32, 1)
	if err := (head.Categorical{N: 3}).LogProb(logits[:3], []int32{int32(acts[0])}, lp); err != nil {
		t.Fatal(err)
	}
	if got := output(t, s, "49")[0]; math.Abs(float64(got-lp[0])) > 1e-5 {
		t.Errorf("graph logp %v, head logp %v", got, lp[0])
	}
}

// SB3's continuous export: the log_std parameter comes out through an Identity, shared by
// the one log_std rule, with the parameter's values.
func TestExposeLogStdParameter(t *testing.T) {
	m := sb3Continuous(2)
	b, err := Recognise(m, nil, box2, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s, eb := session(t, m, b, []float32{0.1, 0.2, -0.3})
	if eb.LogStd != "policy.log_std"+ExposedSuffix {
		t.Fatalf("exposed log_std %q", eb.LogStd)
	}
	outs, err := head.Bind(eb.Spec(box2), tensors(s.Outputs()), eb.Names())
	if err != nil || outs.DeterministicOnly || outs.Split {
		t.Fatalf("head.Bind: %+v %v", outs, err)
	}
	shared, err := head.LogStdLayout(tensors(s.Outputs())[outs.LogStd], 2)
	if err != nil || !shared {
		t.Errorf("log_std %v: shared %v %v", s.Outputs()[outs.LogStd], shared, err)
	}
	x, _ := newIndex(m, nil)
	want, _ := x.constant("policy.log_std", 8)
	got := output(t, s, eb.LogStd)
	for j := range want {
		if float64(got[j]) != want[j] {
			t.Errorf("exposed log_std %v, parameter %v", got[:2], want)
		}
	}
	// The graph's log-probability of its own (mean) action is the head's at the mode.
	lp := make([]float32, 1)
	mean := output(t, s, eb.Params)
	if err := (head.Gaussian{Low: box2.Low, High: box2.High}).Mode(mean[:2], got[:2], make([]float32, 2), nil, lp); err != nil {
		t.Fatal(err)
	}
	if g := output(t, s, "51")[0]; math.Abs(float64(g-lp[0])) > 1e-5 {
		t.Errorf("graph logp %v, head logp %v", g, lp[0])
	}
}

// SB3's SAC export: the exposed mean's tanh is the graph's action, and the binding is
// deterministic only.
func TestExposeSACMean(t *testing.T) {
	m := sb3SAC(2)
	b, err := Recognise(m, nil, box2, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	s, eb := session(t, m, b, []float32{0.5, -0.5, 1})
	outs, err := head.Bind(eb.Spec(box2), tensors(s.Outputs()), eb.Names())
	if err != nil || !outs.DeterministicOnly || outs.Stochastic(eb.Spec(box2)) == nil {
		t.Fatalf("head.Bind: %+v %v", outs, err)
	}
	mean, acts := output(t, s, eb.Params), output(t, s, eb.Actions)
	g := head.TanhGaussian{Low: box2.Low, High: box2.High}
	mode := make([]float32, 2)
	if err := g.Mode(mean[:2], nil, mode, nil, nil); err != nil {
		t.Fatal(err)
	}
	for j := range 2 {
		if math.Abs(float64(mode[j]-acts[j])) > 1e-6 {
			t.Errorf("tanh(exposed mean) %v, graph actions %v", mode, acts[:2])
		}
	}
}

func TestExposeErrors(t *testing.T) {
	m := sb3Discrete(2)
	for _, b := range []Binding{{Params: "nope"}, {Value: "input"}} {
		if _, _, err := Expose(m, b); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
	// Binding graph outputs only adds nothing.
	out, _, err := Expose(m, Binding{Params: "a", Value: "24"})
	if err != nil || !slices.EqualFunc(out.GetGraph().GetOutput(), m.GetGraph().GetOutput(), func(a, b *onnxpb.ValueInfoProto) bool { return a.GetName() == b.GetName() }) {
		t.Errorf("outputs %v, %v", out.GetGraph().GetOutput(), err)
	}
}

// The shapes a session reports (concrete, batch resolved) bind as the declared ones do.
func TestRecogniseWithSessionShapes(t *testing.T) {
	for _, tc := range []struct {
		model *onnxpb.ModelProto
		env   head.Spec
	}{{sb3Discrete(2), cartPole}, {sb3Continuous(2), box2}, {rllibLSTM(2), noVel}, {sampleFactoryGRU(2), cartPole}} {
		want, err := Recognise(tc.model, nil, tc.env, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		data, err := proto.Marshal(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		s, err := onnx.New(context.Background(), data, onnx.Config{MaxBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		infos := tensors(append(s.Inputs(), s.Outputs()...))
		s.Close()
		got, err := Recognise(tc.model, infos, tc.env, Overrides{})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got, ignoreNotes, cmpopts.IgnoreFields(State{}, "Shape")); d != "" {
			t.Errorf("%s: with session shapes (-declared +session):\n%s", want.Family, d)
		}
	}
}
