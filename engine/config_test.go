package engine

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

func TestParseConfigStrict(t *testing.T) {
	for _, tc := range []struct {
		json string
		want string // substring of the error; empty: no error
	}{
		{`{"env": "CartPole-v1", "total_steps": 2048, "seed": 3}`, ""},
		{`{"env": "CartPole-v1", "total_step": 2048}`, `unknown field "total_step"; did you mean "total_steps"?`},
		{`{"env": "CartPole-v1", "learning_rate": 0.001}`, `unknown field "learning_rate"; towerrl calls it "lr"`},
		{`{"env": "CartPole-v1", "gae_lamda": 0.9}`, `did you mean "gae_lambda"?`},
		{`{"env": "CartPole-v1", "zzzzzzzzzzzzzzzz": 1}`, `known fields: env, algo, total_steps`},
		{`{"env": "CartPole-v1"} {"seed": 1}`, "more than one JSON value"},
		{`{"env": "CartPole-v1", "seed": "1"}`, "cannot unmarshal string"},
		{`[1, 2]`, "cannot unmarshal array"},
	} {
		c, err := ParseConfig([]byte(tc.json))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.json, err)
		case tc.want == "" && (c.Env != "CartPole-v1" || c.TotalSteps != 2048 || c.Seed != 3):
			t.Errorf("%s: decoded %+v", tc.json, c)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)):
			t.Errorf("%s: error %v, want one containing %q wrapping ErrConfig", tc.json, err, tc.want)
		}
	}
}

// TestEntCoefZero: an "ent_coef" of 0 written in a JSON config means no entropy bonus (as
// Stable-Baselines3's configs mean it), not the default 0.01, and so does the config.json a
// run writes from it, read again at a resume; a config that leaves ent_coef out gets 0.01.
func TestEntCoefZero(t *testing.T) {
	for _, tc := range []struct {
		json string
		want float64
	}{
		{`{"env": "CartPole-v1", "ent_coef": 0}`, 0},
		{`{"env": "CartPole-v1", "ent_coef": 0.0}`, 0},
		{`{"env": "CartPole-v1", "ent_coef": -1}`, 0},
		{`{"env": "CartPole-v1"}`, 0.01},
		{`{"env": "CartPole-v1", "ent_coef": 0.02}`, 0.02},
	} {
		c, err := ParseConfig([]byte(tc.json))
		if err != nil {
			t.Fatal(err)
		}
		if c, err = c.WithDefaults(); err != nil {
			t.Fatal(err)
		}
		if c.EntCoef != tc.want {
			t.Errorf("%s: EntCoef %v, want %v", tc.json, c.EntCoef, tc.want)
		}
		stored, err := json.Marshal(c) // what config.json holds
		if err != nil {
			t.Fatal(err)
		}
		if c, err = ParseConfig(stored); err != nil {
			t.Fatal(err)
		}
		if c, err = c.WithDefaults(); err != nil {
			t.Fatal(err)
		}
		if c.EntCoef != tc.want {
			t.Errorf("%s: EntCoef %v after config.json is read again, want %v", tc.json, c.EntCoef, tc.want)
		}
	}
}

func TestConfigForeignBinding(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Env: "CartPole-v1", InitPolicy: "p.onnx", Head: "categorical", ActionSpace: "discrete:2", LogitsOutput: "l", ValueOutput: "v"}, ""},
		{Config{Env: "Pendulum-v1", InitPolicy: "p.onnx", Head: "gaussian", LogStdOutput: "ls"}, ""},
		{Config{Env: "CartPole-v1", Head: "categorical"}, "only applies to a foreign InitPolicy"},
		{Config{Env: "CartPole-v1", ValueOutput: "v"}, "only applies to a foreign InitPolicy"},
		{Config{Env: "CartPole-v1", InitPolicy: "p.onnx", ActionSpace: "discrete:3"}, "is not CartPole-v1's action space discrete:2"},
		{Config{Env: "CartPole-v1", InitPolicy: "p.onnx", ActionSpace: "discreet:2"}, "ActionSpace"},
		{Config{Env: "CartPole-v1", InitPolicy: "p.onnx", Head: "gaussian"}, `Head "gaussian" in CartPole-v1's action space`},
		{Config{Env: "Pendulum-v1", InitPolicy: "p.onnx", Head: "beta"}, `Head "beta"`},
	} {
		c, err := tc.cfg.WithDefaults()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
				continue
			}
			h, err := c.binding(mustLookup(t, c.Env))
			names := h.Names
			if err != nil || names.Params != c.LogitsOutput || names.LogStd != c.LogStdOutput || names.Value != c.ValueOutput {
				t.Errorf("%+v: names %+v, %v", tc.cfg, names, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: error %v, want one containing %q", tc.cfg, err, tc.want)
		}
	}
}

func mustLookup(t *testing.T, id string) envs.Spec {
	t.Helper()
	s, err := envs.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConfigHiddenSizes: widths that would exhaust memory are refused before anything is
// allocated (the "hidden": [100000, 100000] crashed with a Go trace).
func TestConfigHiddenSizes(t *testing.T) {
	for _, tc := range []struct {
		hidden []int
		want   string
	}{
		{[]int{64, 64}, ""},
		{[]int{4096, 4096}, ""},
		{[]int{100000, 100000}, "Hidden[0] = 100000, want 1 to 65536"},
		{[]int{60000, 60000}, "parameters"},
		{[]int{64, 0}, "Hidden[1] = 0"},
	} {
		_, err := Config{Env: "CartPole-v1", Hidden: tc.hidden}.WithDefaults()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.hidden, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)):
			t.Errorf("%v: %v, want an error containing %q", tc.hidden, err, tc.want)
		}
	}
}

// TestAlgorithmDefaults: an algorithm's own defaults (algo.Defaulter) fill the fields a run
// leaves at zero, PPO's the rest, and a field the run sets is kept. APPO's sequence bound is
// the largest divisor of the rollout's steps up to 4.
func TestAlgorithmDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg         Config
		steps       int64
		epochs, seq int
		lr          float64
	}{
		{Config{Env: "CartPole-v1"}, 500_000, 4, 0, 2.5e-4},
		{Config{Env: "CartPole-v1", Algo: "appo"}, 600_000, 3, 4, 2.5e-4},
		{Config{Env: "CartPole-v1", Algo: "appo", RolloutSteps: 126}, 600_000, 3, 3, 2.5e-4},
		{Config{Env: "CartPole-v1", Algo: "appo", SeqLen: 32, Epochs: 4, TotalSteps: 500_000}, 500_000, 4, 32, 2.5e-4},
		{Config{Env: "Pendulum-v1", Algo: "appo"}, 1_000_000, 4, 0, 3e-4},
		{Config{Env: "CartPole-v1", Algo: "impala"}, 1_000_000, 2, 0, 1e-4},
		{Config{Env: "CartPole-v1", Algo: "impala", TotalSteps: 300_000, Epochs: 3, LR: 5e-4}, 300_000, 3, 0, 5e-4},
		{Config{Env: "Pendulum-v1", Algo: "impala"}, 1_000_000, 2, 0, 3e-4},
		{Config{Env: "Pendulum-v1"}, 1_000_000, 10, 0, 3e-4},
	} {
		c, err := tc.cfg.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if c.TotalSteps != tc.steps || c.Epochs != tc.epochs || c.SeqLen != tc.seq || c.LR != tc.lr {
			t.Errorf("%s on %s (rollout %d): total_steps %d, epochs %d, seq_len %d, lr %v; want %d, %d, %d, %v", c.Algo, c.Env,
				c.RolloutSteps, c.TotalSteps, c.Epochs, c.SeqLen, c.LR, tc.steps, tc.epochs, tc.seq, tc.lr)
		}
	}
}

// TestEvaluationChecksEveryAlgorithm: the evaluation settings are checked for the off-policy
// algorithms too (their own defaults took over before these checks once): a stopping return
// with no evaluation during training, a negative period, a drawing period below zero.
func TestEvaluationChecksEveryAlgorithm(t *testing.T) {
	r := 400.0
	for _, algo := range []string{"ppo", "dqn"} {
		for _, tc := range []struct {
			c    Config
			want string
		}{
			{Config{StopAtReturn: &r}, "set EvalEvery too"},
			{Config{EvalEvery: -1}, "EvalEvery = -1"},
			{Config{GifEvery: -5}, "GifEvery = -5"},
		} {
			tc.c.Env, tc.c.Algo = "CartPole-v1", algo
			_, err := tc.c.WithDefaults()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want ErrConfig saying %q", algo, err, tc.want)
			}
		}
	}
}
