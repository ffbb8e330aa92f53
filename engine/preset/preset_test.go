package preset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/envs"
)

// TestEveryEnvHasAPPOPreset: every env registered in this binary has a ppo preset, every
// embedded preset parses, and each makes a valid configuration for its env.
func TestEveryEnvHasAPPOPreset(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, p := range all {
		have[p.Name] = true
		if p.About == "" {
			t.Errorf("%s says nothing about where its numbers come from", p.Name)
		}
		if _, err := envs.Lookup(p.Env); err != nil {
			t.Logf("%s: env not registered in this build (%v); not checked", p.Name, err)
			continue
		}
		c, err := p.Base()
		if err != nil {
			t.Fatal(err)
		}
		c.Env, c.Algo = p.Env, p.Algo
		if _, err := c.WithDefaults(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	for _, id := range envs.IDs() {
		if !have["ppo/"+id] {
			t.Errorf("env %s has no ppo preset: add ppo/%s.json (docs/presets.md)", id, id)
		}
	}
}

func TestChoose(t *testing.T) {
	p, ok, err := Choose("", "", "CartPole-v1", false)
	if err != nil || !ok || p.Name != "ppo/CartPole-v1" {
		t.Fatalf("auto: %v %v %v", p.Name, ok, err)
	}
	if p, ok, err = Choose("", "ddppo", "CartPole-v1", false); err != nil || !ok || p.Name != "ppo/CartPole-v1" {
		t.Fatalf("ddppo shares ppo's: %v %v %v", p.Name, ok, err)
	}
	if _, ok, err = Choose("", "impala", "CartPole-v1", false); err != nil || ok {
		t.Fatalf("impala has none: %v %v", ok, err)
	}
	if _, ok, err = Choose("", "ppo", "CartPole-v1", true); err != nil || ok {
		t.Fatalf("a fine-tune takes none unless named: %v %v", ok, err)
	}
	if p, ok, err = Choose("CartPole-v1", "ppo", "Acrobot-v1", true); err != nil || !ok || p.Name != "ppo/CartPole-v1" {
		t.Fatalf("a named preset: %v %v %v", p.Name, ok, err)
	}
	if _, ok, err = Choose(None, "ppo", "CartPole-v1", false); err != nil || ok {
		t.Fatalf("none: %v %v", ok, err)
	}
	// An env that is not registered (MuJoCo without libmujoco) has no preset, and no error.
	if _, ok, err = Choose("", "ppo", "NoSuchEnv-v9", false); err != nil || ok {
		t.Fatalf("unregistered env: %v %v", ok, err)
	}
	for _, name := range []string{"ppo/NoSuchEnv-v9", "nope/CartPole-v1", "ppo/", "a/b/c"} {
		_, _, err := Choose(name, "ppo", "CartPole-v1", false)
		if !errors.Is(err, ErrPreset) || !strings.Contains(err.Error(), "ppo/CartPole-v1") {
			t.Errorf("%q: %v (want an error listing the known presets)", name, err)
		}
	}
}

// TestMalformed: a preset file that does not parse, has keys a preset lacks, fields
// engine.Config lacks, or fields that name a run, is refused naming the file and the field.
func TestMalformed(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ data, want string }{
		"not json":      {`{"config": `, "unexpected EOF"},
		"unknown key":   {`{"about": "x", "confg": {}}`, `unknown field "confg"`},
		"no config":     {`{"about": "x"}`, `no "config" object`},
		"unknown field": {`{"about": "x", "config": {"gama": 0.9}}`, `did you mean "gamma"`},
		"sb3 name":      {`{"about": "x", "config": {"n_steps": 8}}`, `towerrl calls it "rollout_steps"`},
		"wrong type":    {`{"about": "x", "config": {"norm_obs": "yes"}}`, `norm_obs`},
		"names the env": {`{"about": "x", "config": {"env": "CartPole-v1"}}`, `sets "env"`},
		"two objects":   {`{"about": "x", "config": {}} {}`, "more than one"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := Choose(path, "ppo", "CartPole-v1", false)
		if !errors.Is(err, ErrPreset) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want ErrPreset naming %s and %q)", name, err, path, c.want)
		}
	}
	path := filepath.Join(dir, "good.json")
	if err := os.WriteFile(path, []byte(`{"about": "mine", "config": {"lr": 1e-3, "ent_coef": 0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, ok, err := Choose(path, "ppo", "CartPole-v1", false)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	c, err := p.Base()
	if err != nil || c.LR != 1e-3 || c.Preset != path {
		t.Fatalf("%+v %v", c, err)
	}
	c.Env = "CartPole-v1"
	if c, err = c.WithDefaults(); err != nil || c.EntCoef != 0 {
		t.Fatalf("an explicit ent_coef 0 in a preset: %v %v", c.EntCoef, err)
	}
}

// TestLayers: a config file's fields go over a preset's (an explicit false or 0 included),
// the others keep the preset's.
func TestLayers(t *testing.T) {
	p, err := Parse("test", []byte(`{"about": "x", "config": {"norm_obs": true, "norm_reward": true, "hidden": [8, 8], "lr": 0.5, "ent_coef": 0.2}}`))
	if err != nil {
		t.Fatal(err)
	}
	base, err := p.Base()
	if err != nil {
		t.Fatal(err)
	}
	c, err := engine.ParseConfigOver(base, []byte(`{"norm_reward": false, "hidden": [4], "ent_coef": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.NormObs || c.NormReward || len(c.Hidden) != 1 || c.LR != 0.5 || c.EntCoef != -1 || base.Hidden[1] != 8 {
		t.Fatalf("layered %+v (base %+v)", c, base)
	}
	if _, err := engine.ParseConfigOver(base, []byte(`{"gama": 0.9}`)); err == nil || !strings.Contains(err.Error(), `"gamma"`) {
		t.Fatalf("a misspelt field over a preset: %v", err)
	}
}
