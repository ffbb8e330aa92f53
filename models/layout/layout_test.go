package layout

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

var (
	cartPole = head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	pendulum = head.Spec{Head: head.GaussianKind, Low: []float32{-2}, High: []float32{2}, ObsShape: []int{3}}
	box2     = head.Spec{Head: head.GaussianKind, Low: []float32{-1, -1}, High: []float32{1, 1}, ObsShape: []int{3}}
	noVel    = head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{2}}
)

// ignoreNotes compares bindings without their notes (checked apart where they matter).
var ignoreNotes = cmpopts.IgnoreFields(Binding{}, "Notes")

func TestRecogniseSynthetic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model *onnxpb.ModelProto
		env   head.Spec
		o     Overrides
		want  Binding
		note  string // a note that must be among the binding's
	}{
		{"sb3 discrete", sb3Discrete(2), cartPole, Overrides{}, Binding{
			Family: FamilySB3, Head: head.CategoricalKind, Params: "/policy/action_net/Gemm_output_0", Value: "24", Actions: "a",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "input"}, "logits /policy/action_net/Gemm_output_0: what the ArgMax"},
		{"sb3 continuous", sb3Continuous(2), box2, Overrides{}, Binding{
			Family: FamilySB3, Head: head.GaussianKind, Params: "m", LogStd: "policy.log_std", Value: "24", Actions: "m",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "input"}, "log_std policy.log_std: the parameter"},
		{"sb3 older recipe", sb3Older(2), cartPole, Overrides{}, Binding{
			Family: FamilySB3, Head: head.CategoricalKind, Params: "17", Value: "18",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "input"}, "value 18"},
		{"sb3 sac in [-1, 1]", sb3SAC(1), pendulum, Overrides{}, Binding{
			Family: FamilySB3SAC, Head: head.TanhGaussianKind, Params: "/actor/mu/Gemm_output_0", Actions: "16",
			Scale: head.ScaleEnv, DeterministicOnly: true, Observation: "input"}, "mapped onto the env's bounds"},
		{"sb3 sac rescaled", sb3SAC(1, "Add", float32(1), "Mul", float32(0.5), "Mul", []float32{4}, "Add", []float32{-2}), pendulum, Overrides{}, Binding{
			Family: FamilySB3SAC, Head: head.TanhGaussianKind, Params: "/actor/mu/Gemm_output_0", Actions: "16", ActionsScaled: true,
			Scale: head.ScaleEnv, DeterministicOnly: true, Observation: "input"}, "maps tanh's [-1, 1] onto the env's bounds itself (scale [2], bias [0])"},
		{"sac rescaled wrongly", sb3SAC(1, "Mul", float32(3)), pendulum, Overrides{}, Binding{
			Family: FamilySB3SAC, Head: head.TanhGaussianKind, Params: "/actor/mu/Gemm_output_0", Actions: "16", ActionsScaled: true,
			Scale: head.ScaleEnv, DeterministicOnly: true, Observation: "input"}, "warning: the graph maps tanh's [-1, 1] by scale [3], bias [0]; the env's bounds need [2], [0]"},
		{"sac, user says none", sb3SAC(1), pendulum, Overrides{Scale: head.ScaleNone}, Binding{
			Family: FamilySB3SAC, Head: head.TanhGaussianKind, Params: "/actor/mu/Gemm_output_0", Actions: "16", ActionsScaled: true,
			Scale: head.ScaleNone, DeterministicOnly: true, Observation: "input"}, "--action-scale none"},
		{"sac, user says gaussian", sb3SAC(1), pendulum, Overrides{Head: head.GaussianKind}, Binding{
			Family: FamilySB3SAC, Head: head.GaussianKind, Params: "/actor/mu/Gemm_output_0", Actions: "16", ActionsScaled: true,
			Scale: head.ScaleEnv, DeterministicOnly: true, Observation: "input"}, "--head gaussian"},
		{"cleanrl discrete", cleanRLDiscrete(2), cartPole, Overrides{}, Binding{
			Family: FamilyCleanRL, Head: head.CategoricalKind, Params: "19", Value: "20",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs"}, "logits 19: Gemm in actor.4"},
		{"cleanrl continuous", cleanRLContinuous(2), box2, Overrides{}, Binding{
			Family: FamilyCleanRL, Head: head.GaussianKind, Params: "mean", LogStd: "actor_logstd", Value: "value",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs"}, "log_std actor_logstd"},
		{"rllib mlp", rllibMLP(2), cartPole, Overrides{}, Binding{
			Family: FamilyRLlib, Head: head.CategoricalKind, Params: "output",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs", SeqLens: "seq_lens", Zeros: []string{"state_ins"}}, "input state_ins is never read"},
		{"rllib mlp box", rllibMLP(4), box2, Overrides{}, Binding{
			Family: FamilyRLlib, Head: head.GaussianKind, Params: "output", LogStd: "output", Split: true, Actions: "",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs", SeqLens: "seq_lens", Zeros: []string{"state_ins"}}, "mean and log_std output"},
		{"rllib lstm", rllibLSTM(2), noVel, Overrides{}, Binding{
			Family: FamilyRLlib, Head: head.CategoricalKind, Params: "output", ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs",
			SeqLens: "seq_lens", State: []State{
				{Input: "state_in_0", Output: "state_outs", Shape: []int64{-1, 16}, BatchAxis: 0},
				{Input: "state_in_1", Output: "42", Shape: []int64{-1, 16}, BatchAxis: 0}}}, "the LSTM node /lstm/LSTM's initial and final state"},
		{"sample factory gru, batch 1", sampleFactoryGRU(2), cartPole, Overrides{}, Binding{
			Family: FamilySampleFactory, Head: head.CategoricalKind, Params: "/actor_critic/action_parameterization/distribution_linear/Gemm_output_0",
			Actions: "output_actions", ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs",
			State: []State{{Input: "rnn_states", Output: "output_rnn_states", Shape: []int64{1, 16}, BatchAxis: 0}}}, "GRU"},
		{"sb3-contrib recurrent ppo", recurrentPPO(2), noVel, Overrides{}, Binding{
			Family: FamilySB3Recurrent, Head: head.CategoricalKind, Params: "/policy/action_net/Gemm_output_0", Value: "values", Actions: "actions",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs", EpisodeStarts: "episode_starts", State: []State{
				{Input: "lstm_h", Output: "lstm_h_out", Shape: []int64{1, -1, 16}, BatchAxis: 1},
				{Input: "lstm_c", Output: "lstm_c_out", Shape: []int64{1, -1, 16}, BatchAxis: 1}}}, "batch on axis 1"},
		{"drawn actions, memory by shape", drawnWithMemory(3), head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{4}}, Overrides{}, Binding{
			Family: FamilyConvention, Head: head.CategoricalKind, Params: "/head/fc/Gemm_output_0",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs",
			State: []State{{Input: "mem", Output: "next", Shape: []int64{-1, 8}, BatchAxis: 0}}}, "the graph draws its actions"},
		{"convention", conventional(2, nil), cartPole, Overrides{}, Binding{
			Family: FamilyConvention, Head: head.CategoricalKind, Params: "logits", Value: "value",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs"}, "value value"},
		{"towerrl metadata", conventional(2, map[string]string{head.KeyHead: "categorical", head.KeyActionSpace: "discrete:2"}), cartPole, Overrides{}, Binding{
			Family: FamilyTowerRL, Head: head.CategoricalKind, Params: "logits", Value: "value",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs"}, "towerrl metadata: categorical head"},
		{"user names win", sb3Discrete(2), cartPole, Overrides{Names: head.Names{Value: "49", Actions: "/policy/ArgMax_output_0"}}, Binding{
			Family: FamilySB3, Head: head.CategoricalKind, Params: "/policy/action_net/Gemm_output_0", Value: "49", Actions: "/policy/ArgMax_output_0",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "input"}, "--actions-output /policy/ArgMax_output_0 (named by the user)"},
		{"user names the mean as the actions too", sb3Continuous(2), box2, Overrides{Names: head.Names{Params: "m", LogStd: "policy.log_std", Value: "24", Actions: "m"}}, Binding{
			Family: FamilySB3, Head: head.GaussianKind, Params: "m", LogStd: "policy.log_std", Value: "24", Actions: "m",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "input"}, "--actions-output m (named by the user)"},
		{"user names a split output for both", rllibMLP(4), box2, Overrides{Names: head.Names{Params: "output", LogStd: "output"}}, Binding{
			Family: FamilyRLlib, Head: head.GaussianKind, Params: "output", LogStd: "output", Split: true,
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "obs", SeqLens: "seq_lens", Zeros: []string{"state_ins"}}, "--logstd-output output (named by the user)"},
		{"user moves a tensor to another role", sb3Discrete(2), cartPole, Overrides{Names: head.Names{Value: "a"}}, Binding{
			Family: FamilySB3, Head: head.CategoricalKind, Params: "/policy/action_net/Gemm_output_0", Value: "a",
			ActionsScaled: true, Scale: head.ScaleEnv, Observation: "input"}, "--value-output a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Recognise(tc.model, nil, tc.env, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, ignoreNotes, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-want +got):\n%s\nnotes:\n%s", d, strings.Join(got.Notes, "\n"))
			}
			if !slicesContainsSub(got.Notes, tc.note) {
				t.Errorf("no note containing %q:\n%s", tc.note, strings.Join(got.Notes, "\n"))
			}
		})
	}
}

func slicesContainsSub(notes []string, sub string) bool {
	for _, n := range notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

func TestRecogniseErrors(t *testing.T) {
	// Three values a row for a two-action env, and no layer of two: nothing fits.
	b := newBuilder()
	obs := b.input("obs", f32, "batch", 4)
	b.rename(b.node("", "MatMul", []string{obs, b.param("w", nil, 4, 3)}), "out0")
	b.output("out0", f32, "batch", 3)
	_, err := Recognise(b.model(), nil, cartPole, Overrides{})
	var ue *UnrecognisedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrNotRecognised) {
		t.Fatalf("error %v, want an *UnrecognisedError", err)
	}
	for _, want := range []string{"out0 float32[?,3] (graph output)", "--logits-output NAME --value-output NAME --head categorical", "--deterministic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	_, err = Recognise(sb3Continuous(2), nil, box2, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]Overrides{
		"unknown tensor":        {Names: head.Names{Value: "critic"}},
		"params too wide":       {Names: head.Names{Params: "/policy/mlp_extractor/policy_net/policy_net.3/Tanh_output_0"}},
		"value too wide":        {Names: head.Names{Value: "m"}},
		"head outside the env":  {Head: head.CategoricalKind},
		"bad scale":             {Scale: "half"},
		"box head for discrete": {},
	} {
		env := box2
		if name == "box head for discrete" {
			env, o = cartPole, Overrides{Head: head.TanhGaussianKind}
		}
		if _, err := Recognise(sb3Continuous(2), nil, env, o); err == nil {
			t.Errorf("%s: no error", name)
		} else if name == "unknown tensor" && !strings.Contains(err.Error(), "/policy/action_net/Gemm_output_0 float32[1,2] (Gemm in policy.action_net)") {
			t.Errorf("%s: the error lists no candidates with shapes: %v", name, err)
		}
	}
}
