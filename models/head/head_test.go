package head

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// Hand-worked: logsumexp(1,2,3) = log(e + e² + e³) = log(30.192874850) = 3.407605964.
func TestCategoricalLogProbByHand(t *testing.T) {
	c := Categorical{N: 3}
	logits := []float32{1, 2, 3, 3, 2, 1}
	logp := make([]float32, 2)
	if err := c.LogProb(logits, []int32{2, 1}, logp); err != nil {
		t.Fatal(err)
	}
	want := []float64{3 - 3.407605964, 2 - 3.407605964}
	for i := range want {
		if !near(float64(logp[i]), want[i], 1e-6) {
			t.Errorf("row %d: logp %v, want %v", i, logp[i], want[i])
		}
	}
	acts := make([]int32, 2)
	if err := c.Mode(logits, acts, logp); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(acts, []int32{2, 0}) || !near(float64(logp[1]), 3-3.407605964, 1e-6) {
		t.Errorf("mode %v logp %v", acts, logp)
	}
}

// Probabilities 0.1, 0.2, 0.7 from logits log(1), log(2), log(7). With n = 200000 draws a
// frequency's standard error is at most sqrt(0.25/n) ≈ 0.0011; the tolerance is 5 of those.
func TestCategoricalSampleFrequencies(t *testing.T) {
	const n = 200000
	c := Categorical{N: 3}
	row := []float32{0, float32(math.Log(2)), float32(math.Log(7))}
	logits := make([]float32, 0, n*3)
	for range n {
		logits = append(logits, row...)
	}
	acts := make([]int32, n)
	logp := make([]float32, n)
	if err := c.Sample(rand.New(rand.NewPCG(1, 2)), logits, acts, logp); err != nil {
		t.Fatal(err)
	}
	var count [3]int
	for i, a := range acts {
		count[a]++
		if want := math.Log([]float64{0.1, 0.2, 0.7}[a]); !near(float64(logp[i]), want, 1e-6) {
			t.Fatalf("draw %d: action %d logp %v, want %v", i, a, logp[i], want)
		}
	}
	for a, p := range []float64{0.1, 0.2, 0.7} {
		if f := float64(count[a]) / n; !near(f, p, 0.0056) {
			t.Errorf("action %d drawn with frequency %.4f, want %.1f ± 0.0056", a, f, p)
		}
	}
}

// Hand-worked: at the mean z = 0, so log N = -log σ - ½log 2π per dimension; with
// log σ = (-0.5, 0.2): (0.5 - 0.918938533) + (-0.2 - 0.918938533) = -1.537877066.
func TestGaussianModeAndClipByHand(t *testing.T) {
	g := Gaussian{Low: []float32{-2, -2}, High: []float32{2, 2}}
	mean := []float32{0.5, 1, 3, -5}
	logStd := []float32{-0.5, 0.2}
	raw, clipped, logp := make([]float32, 4), make([]float32, 4), make([]float32, 2)
	if err := g.Mode(mean, logStd, raw, clipped, logp); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]float32{0.5, 1, 3, -5}, raw); d != "" {
		t.Errorf("raw: %s", d)
	}
	if d := cmp.Diff([]float32{0.5, 1, 2, -2}, clipped); d != "" {
		t.Errorf("clipped: %s", d)
	}
	for i := range logp {
		if !near(float64(logp[i]), -1.537877066, 1e-6) {
			t.Errorf("row %d: logp %v, want -1.537877066", i, logp[i])
		}
	}
}

// Draws from N(1.5, 0.5²): the sample mean is within 5 standard errors (0.5/√n) of 1.5 and
// the sample standard deviation within 5·0.5/√(2n) of 0.5; each logp matches the density
// worked independently from the stored action.
func TestGaussianSampleStatistics(t *testing.T) {
	const n = 100000
	g := Gaussian{Low: []float32{-10}, High: []float32{10}}
	mean := make([]float32, n)
	for i := range mean {
		mean[i] = 1.5
	}
	logStd := []float32{float32(math.Log(0.5))}
	raw, logp := make([]float32, n), make([]float32, n)
	if err := g.Sample(rand.New(rand.NewPCG(3, 4)), mean, logStd, raw, nil, logp); err != nil {
		t.Fatal(err)
	}
	var s, ss float64
	for i, a := range raw {
		s += float64(a)
		ss += float64(a) * float64(a)
		sigma := math.Exp(float64(logStd[0]))
		want := -math.Pow(float64(a)-1.5, 2)/(2*sigma*sigma) - math.Log(sigma*math.Sqrt(2*math.Pi))
		if !near(float64(logp[i]), want, 1e-5) {
			t.Fatalf("draw %d: logp %v, want %v", i, logp[i], want)
		}
	}
	m := s / n
	sd := math.Sqrt(ss/n - m*m)
	if !near(m, 1.5, 5*0.5/math.Sqrt(n)) || !near(sd, 0.5, 5*0.5/math.Sqrt(2*n)) {
		t.Errorf("sample mean %.4f sd %.4f, want 1.5 and 0.5", m, sd)
	}
}

func TestSeededReproducible(t *testing.T) {
	c := Categorical{N: 4}
	logits := make([]float32, 4*64)
	draw := func(seed uint64) []int32 {
		a := make([]int32, 64)
		if err := c.Sample(rand.New(rand.NewPCG(seed, 0)), logits, a, nil); err != nil {
			t.Fatal(err)
		}
		return a
	}
	if !slices.Equal(draw(7), draw(7)) {
		t.Error("same seed, different actions")
	}
	if slices.Equal(draw(7), draw(8)) {
		t.Error("different seeds, same 64 actions")
	}
}

func TestSampleAllocatesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	rngs := rowStreams(1024)
	c, c5 := Categorical{N: 2}, Categorical{N: 5}
	logits, acts, logp := normals(5*1024, 1), make([]int32, 1024), make([]float32, 1024)
	g := Gaussian{Low: []float32{-2}, High: []float32{2}}
	mean, raw, clipped := make([]float32, 1024), make([]float32, 1024), make([]float32, 1024)
	ls, perRow := []float32{0}, normals(1024, 0.5)
	if a := testing.AllocsPerRun(20, func() {
		c.Sample(rng, logits[:2048], acts, logp)
		c.SampleRows(rngs, logits[:2048], acts, logp)
		c5.SampleRows(rngs, logits, acts, logp)
		c5.Mode(logits, acts, logp)
		c5.LogProb(logits, acts, logp)
		g.Sample(rng, mean, ls, raw, clipped, logp)
		g.SampleRows(rngs, mean, ls, raw, clipped, logp)
		g.SampleRows(rngs, mean, perRow, raw, clipped, logp)
	}); a != 0 {
		t.Errorf("%v allocations per Sample", a)
	}
}

func TestBadHeadInput(t *testing.T) {
	c := Categorical{N: 2}
	for name, err := range map[string]error{
		"short logits": c.Sample(rand.New(rand.NewPCG(1, 1)), make([]float32, 3), make([]int32, 2), nil),
		"nan logits":   c.Mode([]float32{0, float32(math.NaN())}, make([]int32, 1), nil),
		"action range": c.LogProb([]float32{0, 0}, []int32{2}, make([]float32, 1)),
		"gauss logstd": Gaussian{Low: []float32{-1, -1}, High: []float32{1, 1}}.Mode(make([]float32, 4), make([]float32, 3), make([]float32, 4), nil, nil),
		"gauss nan":    Gaussian{Low: []float32{-1}, High: []float32{1}}.Mode([]float32{float32(math.NaN())}, []float32{0}, make([]float32, 1), nil, nil),
		"gauss nan log_std": Gaussian{Low: []float32{-1}, High: []float32{1}}.SampleRows(rowStreams(2), []float32{0, 0}, []float32{0, float32(math.NaN())},
			make([]float32, 2), nil, nil),
		"nil rng":           c.Sample(nil, make([]float32, 2), make([]int32, 1), nil),
		"gauss nil rng":     Gaussian{Low: []float32{-1}, High: []float32{1}}.Sample(nil, []float32{0}, []float32{0}, make([]float32, 1), nil, nil),
		"few streams":       c.SampleRows(rowStreams(1), make([]float32, 4), make([]int32, 2), nil),
		"gauss few streams": Gaussian{Low: []float32{-1}, High: []float32{1}}.SampleRows(rowStreams(1), []float32{0, 0}, []float32{0}, make([]float32, 2), nil, nil),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	for _, spec := range []Spec{
		{Head: CategoricalKind, EnvID: "CartPole-v1", ObsShape: []int{4}, N: 2, Version: 3},
		{Head: GaussianKind, EnvID: "Pendulum-v1", ObsShape: []int{3}, Low: []float32{-2}, High: []float32{2}},
		{Head: GaussianKind, Low: []float32{-1, 0}, High: []float32{1, 0.5}},
		{Head: TanhGaussianKind, Low: []float32{-2}, High: []float32{2}},
		{Head: TanhGaussianKind, Low: []float32{-1, -1}, High: []float32{1, 1}, Scale: ScaleNone},
	} {
		got, ok, err := FromMetadata(spec.Metadata())
		if err != nil || !ok {
			t.Fatalf("%+v: %v %v", spec, ok, err)
		}
		if d := cmp.Diff(spec, got); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
	if s := (Spec{Head: GaussianKind, Low: []float32{-2}, High: []float32{2}}); s.ActionSpace() != "box:1:-2:2" {
		t.Errorf("ActionSpace %q", s.ActionSpace())
	}
	if _, ok, err := FromMetadata(map[string]string{"producer": "x"}); ok || err != nil {
		t.Errorf("foreign: ok %v err %v", ok, err)
	}
	for _, bad := range []map[string]string{
		{KeyHead: "beta", KeyActionSpace: "discrete:2"},
		{KeyHead: "categorical"},
		{KeyHead: "categorical", KeyActionSpace: "discrete:zero"},
		{KeyHead: "gaussian", KeyActionSpace: "box:2:-1:1,2,3"},
		{KeyHead: "gaussian", KeyActionSpace: "box:1:2:-2"},
		{KeyHead: "categorical", KeyActionSpace: "discrete:2", KeyObsShape: "4,x"},
		{KeyHead: "tanh-gaussian", KeyActionSpace: "box:1:-2:2", KeyActionScale: "half"},
		{KeyHead: "tanh-gaussian", KeyActionSpace: "box:1:-inf:inf"},
	} {
		if _, _, err := FromMetadata(bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func info(name string, dt DType, batched bool, row ...int64) Tensor {
	decl := row
	if batched {
		decl = append([]int64{-1}, row...)
	}
	return Tensor{Name: name, DType: dt, Declared: decl, Batched: batched, Row: row}
}

// The one log_std rule: [D], [1, D], [1] for D = 1 shared; [batch, D] per row; others refused.
func TestLogStdLayout(t *testing.T) {
	for _, tc := range []struct {
		info   Tensor
		d      int
		shared bool
		bad    bool
	}{
		{info("sb3", Float32, false, 3), 3, true, false},
		{info("sb3_1d", Float32, false, 1), 1, true, false},
		{info("cleanrl", Float32, false, 1, 3), 3, true, false},
		{info("cleanrl_1d", Float32, false, 1, 1), 1, true, false},
		{info("per_row", Float32, true, 3), 3, false, false},
		{info("per_row_1d", Float32, true, 1), 1, false, false},
		{info("per_row_3d", Float32, true, 1, 3), 3, false, false},
		{info("wrong_size", Float32, false, 2), 3, false, true},
		{info("matrix", Float32, false, 2, 3), 6, false, true},
		{info("batched_wrong", Float32, true, 6), 3, false, true},
	} {
		shared, err := LogStdLayout(tc.info, tc.d)
		if (err != nil) != tc.bad || shared != tc.shared {
			t.Errorf("%s (D=%d): shared %v err %v; want shared %v error %v", tc.info, tc.d, shared, err, tc.shared, tc.bad)
		}
	}
}

func TestBindLayouts(t *testing.T) {
	cat := Spec{Head: CategoricalKind, N: 2}
	box := Spec{Head: GaussianKind, Low: []float32{-1, -1}, High: []float32{1, 1}}
	sac := Spec{Head: TanhGaussianKind, Low: []float32{-2, -2}, High: []float32{2, 2}}
	dqn := Spec{Head: QValuesKind, N: 2, Epsilon: 0.05}
	none := Outputs{Params: -1, LogStd: -1, Value: -1, Actions: -1}
	with := func(f func(*Outputs)) Outputs { o := none; f(&o); return o }
	for _, tc := range []struct {
		name  string
		spec  Spec
		outs  []Tensor
		names Names
		want  Outputs
		err   string
	}{
		{"sb3 discrete actions only", cat, []Tensor{info("a", Int64, true), info("24", Float32, true, 1), info("log_prob", Float32, true)},
			Names{}, with(func(o *Outputs) { o.Actions, o.DeterministicOnly = 0, true }), ""}, // "24" is the value only to a layout that knows SB3
		{"sb3 discrete with exposed logits", cat, []Tensor{info("a", Int64, true), info("24", Float32, true, 1), info("/policy/action_net/Gemm_output_0", Float32, true, 2)},
			Names{Params: "/policy/action_net/Gemm_output_0", Value: "24"}, with(func(o *Outputs) { o.Actions, o.Value, o.Params = 0, 1, 2 }), ""},
		{"sample factory actions", cat, []Tensor{info("output_actions", Int64, true, 1), info("output_rnn_states", Float32, true, 8)},
			Names{}, with(func(o *Outputs) { o.Actions, o.DeterministicOnly = 0, true }), ""},
		{"rllib split", box, []Tensor{info("output", Float32, true, 4)},
			Names{}, with(func(o *Outputs) { o.Params, o.LogStd, o.Split = 0, 0, true }), ""},
		{"sb3 log_std parameter", box, []Tensor{info("mean", Float32, true, 2), info("policy.log_std", Float32, false, 2)},
			Names{}, with(func(o *Outputs) { o.Params, o.LogStd = 0, 1 }), ""},
		{"cleanrl log_std [1,D]", box, []Tensor{info("mean", Float32, true, 2), info("actor_logstd", Float32, false, 1, 2), info("value", Float32, true, 1)},
			Names{}, with(func(o *Outputs) { o.Params, o.LogStd, o.Value = 0, 1, 2 }), ""},
		{"sac deterministic", sac, []Tensor{info("16", Float32, true, 2), info("mu", Float32, true, 2)},
			Names{Actions: "16", Params: "mu"}, with(func(o *Outputs) { o.Params, o.Actions, o.DeterministicOnly = 1, 0, true }), ""},
		{"sac with log_std", sac, []Tensor{info("mu", Float32, true, 2), info("ls", Float32, true, 2)},
			Names{LogStd: "ls"}, with(func(o *Outputs) { o.Params, o.LogStd = 0, 1 }), ""},
		{"towerrl dqn q_values", dqn, []Tensor{info("q_values", Float32, true, 2)},
			Names{}, with(func(o *Outputs) { o.Params = 0 }), ""},
		{"float actions by name", box, []Tensor{info("actions", Float32, true, 2)},
			Names{}, with(func(o *Outputs) { o.Actions, o.DeterministicOnly = 0, true }), ""},
		{"wrong log_std", box, []Tensor{info("mean", Float32, true, 2), info("log_std", Float32, false, 3)},
			Names{}, Outputs{}, "log_std"},
		{"wrong actions", box, []Tensor{info("actions", Int64, true, 1)},
			Names{}, Outputs{}, "float32 values a row"},
		{"nothing", cat, []Tensor{info("log_prob", Float32, true)},
			Names{}, Outputs{}, "--logits-output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Bind(tc.spec, tc.outs, tc.names)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if err := got.Stochastic(tc.spec); (err != nil) != got.DeterministicOnly || (err != nil && !errors.Is(err, ErrDeterministicOnly)) {
				t.Errorf("Stochastic: %v", err)
			} else if err != nil && !strings.Contains(err.Error(), "--deterministic") {
				t.Errorf("Stochastic error does not name --deterministic: %v", err)
			}
		})
	}
}

// TestActionSpaceSizes: a size from a file's metadata is bounded before anything is sized by
// it (a 375-byte ONNX with towerrl.action_space=box:99999999999:-1:1 exhausted memory; box:1e9
// took 58 s), with an error naming the limit.
func TestActionSpaceSizes(t *testing.T) {
	for _, text := range []string{"box:99999999999:-1:1", "box:1000000000:-1:1", "discrete:4611686018427387904", "box:65537:-1:1", "discrete:0"} {
		var s Spec
		start := time.Now()
		err := s.ParseActionSpace(text)
		if err == nil || !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "from 1 to 65536") {
			t.Errorf("%s: %v", text, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v", text, d)
		}
		meta := map[string]string{KeyHead: "gaussian", KeyActionSpace: text}
		if _, _, err := FromMetadata(meta); err == nil {
			t.Errorf("metadata %s accepted", text)
		}
	}
	var s Spec
	if err := s.ParseActionSpace("box:65536:-1:1"); err != nil || len(s.Low) != 65536 {
		t.Errorf("box:65536: %v", err)
	}
}
