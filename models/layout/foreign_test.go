package layout

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// foreignDir holds the exporters' fixtures (scripts/gen_fixtures_foreign.py): NAME.onnx with
// NAME.json, whose "bind" is the ground truth of where each role lives.
const foreignDir = "../../testdata/foreign"

type fixture struct {
	Family        string `json:"family"`
	Env           string `json:"env"`
	Head          string `json:"head"`
	ActionScaling string `json:"action_scaling"`
	Bind          struct {
		Logits  *string `json:"logits"`
		Mean    *string `json:"mean"`
		LogStd  *string `json:"log_std"`
		Value   *string `json:"value"`
		Actions *string `json:"actions"`
	} `json:"bind"`
	Recurrent *struct {
		States []struct {
			Input     string `json:"input"`
			Output    string `json:"output"`
			BatchAxis int    `json:"batch_axis"`
		} `json:"state_pairs"`
		SeqLens       *feed `json:"seq_lens"`
		EpisodeStarts *feed `json:"episode_starts"`
	} `json:"recurrent"`
	InputFile string `json:"input_file"`
	Inputs    []struct {
		Name string `json:"name"`
	} `json:"inputs"`
	ExtraInputs []extraInput `json:"extra_inputs"`
}

// feed is an input a recurrent policy takes besides observations and states.
type feed struct {
	Input string `json:"input"`
}

func (f *feed) name() string {
	if f == nil {
		return ""
	}
	return f.Input
}

// extraInput is an input besides the observations, and what the fixture says to feed it.
type extraInput struct {
	Name string `json:"name"`
	Feed string `json:"feed"`
}

// fixtureEnvs are the action spaces of the envs the fixtures act in.
var fixtureEnvs = map[string]head.Spec{
	"CartPole-v1":      {Head: head.CategoricalKind, N: 2, ObsShape: []int{4}},
	"CartPoleNoVel-v1": {Head: head.CategoricalKind, N: 2, ObsShape: []int{4}},
	"Pendulum-v1":      {Head: head.GaussianKind, Low: []float32{-2}, High: []float32{2}, ObsShape: []int{3}},
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// TestForeignFixtures recognises every fixture without flags and checks the binding against
// its ground truth: the same tensor, or one ONNX Runtime shows to hold the same values on the
// fixture's observations (a graph output that is the inner tensor reshaped or expanded).
func TestForeignFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(foreignDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no fixtures in %s; generate them with scripts/gen_fixtures_foreign.py", foreignDir)
	}
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			var fx fixture
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &fx); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(foreignDir, name+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			m := &onnxpb.ModelProto{}
			if err := proto.Unmarshal(raw, m); err != nil {
				t.Fatal(err)
			}
			env, ok := fixtureEnvs[fx.Env]
			switch {
			case fx.Env == "" && fx.Head == string(head.CategoricalKind) && fx.Bind.Logits != nil:
				// A fixture with no env (infer only): its action space is as wide as its logits.
				env = head.Spec{Head: head.CategoricalKind, N: width(t, m, *fx.Bind.Logits)}
			case !ok:
				t.Fatalf("env %q is not in fixtureEnvs; add its action space", fx.Env)
			}
			b, err := Recognise(m, nil, env, Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s (%s):\n  %s", b.Family, fx.Family, strings.Join(b.Notes, "\n  "))
			if string(b.Head) != fx.Head {
				t.Errorf("head %s, want %s", b.Head, fx.Head)
			}
			if b.Head == head.TanhGaussianKind && b.ActionsScaled != (fx.ActionScaling == "none") {
				t.Errorf("actions scaled %v, want action_scaling %s", b.ActionsScaled, fx.ActionScaling)
			}
			params := str(fx.Bind.Logits)
			if params == "" {
				params = str(fx.Bind.Mean)
			}
			for _, role := range []struct{ what, got, want string }{
				{"params", b.Params, params}, {"log_std", b.LogStd, str(fx.Bind.LogStd)},
				{"value", b.Value, str(fx.Bind.Value)}, {"actions", b.Actions, str(fx.Bind.Actions)},
			} {
				switch {
				case role.got == role.want:
				case role.what == "log_std" && role.want == "":
					// More than the ground truth: a log_std the fixture's notes missed must be
					// a computed tensor of D finite values a row.
					t.Logf("log_std %s bound where the fixture names none", role.got)
					finiteRows(t, m, name, b.Observation, role.got, env.ActionDim())
				case role.got == "" || role.want == "":
					t.Errorf("%s: bound %q, want %q", role.what, role.got, role.want)
				default:
					sameValues(t, m, name, b.Observation, role.what, role.got, role.want)
				}
			}
			bindExposed(t, m, b, env)
			// Every input is fed: the observation, and each extra one by some role.
			for _, in := range fx.Inputs {
				extra := slices.ContainsFunc(fx.ExtraInputs, func(e extraInput) bool { return e.Name == in.Name })
				if r := fx.Recurrent; r != nil {
					extra = extra || in.Name == r.SeqLens.name() || in.Name == r.EpisodeStarts.name()
					for _, s := range r.States {
						extra = extra || in.Name == s.Input
					}
				}
				fed := slices.Contains(b.Zeros, in.Name) || in.Name == b.SeqLens || in.Name == b.EpisodeStarts ||
					slices.ContainsFunc(b.State, func(s State) bool { return s.Input == in.Name })
				switch {
				case !extra && in.Name != b.Observation:
					t.Errorf("input %s is the observation; bound %q", in.Name, b.Observation)
				case extra && !fed:
					t.Errorf("extra input %s is not fed", in.Name)
				}
			}
			if fx.Recurrent != nil {
				var want []State
				for _, s := range fx.Recurrent.States {
					want = append(want, State{Input: s.Input, Output: s.Output, BatchAxis: s.BatchAxis})
				}
				got := make([]State, len(b.State))
				for i, s := range b.State {
					got[i] = State{Input: s.Input, Output: s.Output, BatchAxis: s.BatchAxis}
				}
				if !slices.Equal(stateKeys(got), stateKeys(want)) {
					t.Errorf("states %+v, want %+v", got, want)
				}
				if b.SeqLens != fx.Recurrent.SeqLens.name() || b.EpisodeStarts != fx.Recurrent.EpisodeStarts.name() {
					t.Errorf("seq_lens %q episode_starts %q, want %q %q", b.SeqLens, b.EpisodeStarts, fx.Recurrent.SeqLens.name(), fx.Recurrent.EpisodeStarts.name())
				}
			} else if len(b.State) > 0 {
				t.Errorf("states %+v in a feed-forward policy", b.State)
			}
		})
	}
}

func stateKeys(s []State) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = x.Input + "→" + x.Output + "@" + string(rune('0'+x.BatchAxis))
	}
	slices.Sort(out)
	return out
}

// sameValues checks, with ONNX Runtime on the fixture's first observations, that tensors got
// and want hold the same values.
func sameValues(t *testing.T, m *onnxpb.ModelProto, name, obs, role, got, want string) {
	t.Helper()
	g, w := fixtureRows(t, m, name, obs, got), fixtureRows(t, m, name, obs, want)
	for r := range g {
		if len(g[r]) != len(w[r]) {
			t.Fatalf("%s: %s holds %d values a row, %s %d", role, got, len(g[r]), want, len(w[r]))
		}
		for k := range g[r] {
			if math.Abs(g[r][k]-w[r][k]) > 1e-6*max(1, math.Abs(w[r][k])) {
				t.Fatalf("%s: %s = %v, want %s = %v (row %d)", role, got, g[r], want, w[r], r)
			}
		}
	}
}

// finiteRows checks that tensor got holds d finite values for each of the fixture's first
// observations.
func finiteRows(t *testing.T, m *onnxpb.ModelProto, name, obs, got string, d int) {
	t.Helper()
	for r, v := range fixtureRows(t, m, name, obs, got) {
		if len(v) != d || slices.ContainsFunc(v, func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }) {
			t.Fatalf("%s: row %d holds %v, want %d finite values", got, r, v, d)
		}
	}
}

// fixtureRows exposes tensor, runs the fixture's first 4 observations one row at a time (other
// inputs zero) and returns the tensor's values for each.
func fixtureRows(t *testing.T, m *onnxpb.ModelProto, name, obs, tensor string) [][]float64 {
	t.Helper()
	s, eb := openExposed(t, m, Binding{Params: tensor})
	in, err := npy.ReadFile(filepath.Join(foreignDir, name+".input.npy"))
	if err != nil {
		t.Fatal(err)
	}
	oi, err := s.InputIndex(obs)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := s.OutputIndex(eb.Params)
	if err != nil {
		t.Fatal(err)
	}
	width := in.Len() / in.Shape[0]
	var rows [][]float64
	for r := range min(in.Shape[0], 4) {
		switch {
		case in.F32 != nil:
			buf, err := onnx.Input[float32](s, oi)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf, in.F32[r*width:(r+1)*width])
		case in.U8 != nil:
			buf, err := onnx.Input[uint8](s, oi)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf, in.U8[r*width:(r+1)*width])
		default:
			t.Fatalf("%s.input.npy holds %s", name, in.Descr)
		}
		if err := s.Run(1); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, floats(t, s, ti))
	}
	return rows
}

// floats reads output i (float32 or int64) as float64s.
func floats(t *testing.T, s *onnx.Session, i int) []float64 {
	t.Helper()
	info := s.Outputs()[i]
	n := info.RowSize()
	var out []float64
	switch info.DType {
	case onnx.Float32:
		v, err := onnx.Output[float32](s, i)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v[:n] {
			out = append(out, float64(x))
		}
	case onnx.Int64:
		v, err := onnx.Output[int64](s, i)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range v[:n] {
			out = append(out, float64(x))
		}
	default:
		t.Fatalf("output %s: dtype %s", info.Name, info.DType)
	}
	return out
}

// bindExposed binds the head over the exposed model's session outputs, as a batcher does.
func bindExposed(t *testing.T, m *onnxpb.ModelProto, b Binding, env head.Spec) {
	t.Helper()
	s, eb := openExposed(t, m, b)
	outs, err := head.Bind(eb.Spec(env), tensors(s.Outputs()), eb.Names())
	if err != nil {
		t.Fatalf("head.Bind over the exposed outputs: %v", err)
	}
	if outs.DeterministicOnly != b.DeterministicOnly || outs.Split != b.Split {
		t.Errorf("head.Bind %+v, binding deterministic-only %v split %v", outs, b.DeterministicOnly, b.Split)
	}
	if outs.LogStd >= 0 && !outs.Split {
		if _, err := head.LogStdLayout(tensors(s.Outputs())[outs.LogStd], env.ActionDim()); err != nil {
			t.Error(err)
		}
	}
}

// width is the number of values a row of tensor name holds, from ONNX Runtime's shapes.
func width(t *testing.T, m *onnxpb.ModelProto, name string) int {
	t.Helper()
	s, eb := openExposed(t, m, Binding{Params: name})
	i, err := s.OutputIndex(eb.Params)
	if err != nil {
		t.Fatal(err)
	}
	return s.Outputs()[i].RowSize()
}
