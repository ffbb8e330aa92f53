// Package preset holds towerrl's tuned settings per (algorithm, environment), as data: one
// JSON file per pair under this folder (ppo/Pendulum-v1.json), embedded in the binary. A
// preset's "config" object holds engine.Config fields by their JSON names — the very fields
// of a `train --config` file and of a run's config.json — so a preset reads, diffs and
// copies like any config; beside it, "about" says where the numbers come from and what they
// were measured to give.
//
// cmd/train applies the preset of its --algo and --env when no --preset is given: the
// preset's fields first, a --config file's fields over them, then the flags given on the
// command line ([Choose], then engine.ParseConfigOver). The run's config.json records the
// preset's name (engine.Config.Preset), or "none".
//
// Adding a preset is adding a file: ALGO/ENV.json, ENV a Gymnasium id. A preset whose env is
// not registered in the running binary (MuJoCo built without libmujoco) is never chosen
// automatically; it still parses, and names itself in [All]. Algorithms that train as another
// share its presets ([Shares]: ddppo uses ppo's).
//
// Everything here is read-only; the functions are safe for concurrent use.
package preset

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/bounded"
)

//go:embed */*.json
var files embed.FS

// ErrPreset is wrapped by errors about a preset that does not exist or does not parse.
var ErrPreset = errors.New("preset")

// None is the name of no preset: the engine's plain defaults.
const None = "none"

// Shares maps an algorithm to the one whose presets it uses when it has none of its own.
var Shares = map[string]string{"ddppo": "ppo"}

// Preset is one tuned set of settings.
type Preset struct {
	Name  string // "ALGO/ENV" for an embedded preset, the file's path for one read from disk
	Algo  string // the folder it was found under ("" for a file from disk)
	Env   string // the env it was tuned for ("" for a file from disk)
	About string // where the numbers come from, and what they gave
	// Config holds the engine.Config fields the preset sets, as written (a JSON object).
	Config json.RawMessage
}

// file is a preset file's layout.
type file struct {
	About  string          `json:"about"`
	Config json.RawMessage `json:"config"`
}

// notInPresets are engine.Config fields a preset may not set: what names the run rather than
// tunes it.
var notInPresets = []string{"env", "algo", "seed", "preset", "run_id", "init_policy", "init_policy_sha256", "head",
	"action_space", "logits_output", "logstd_output", "value_output"}

// Parse reads a preset file's bytes: {"about": "...", "config": {engine.Config fields}}.
// Unknown keys, fields engine.Config does not have and fields that name a run (env, algo,
// seed, init_policy, ...) are errors naming the preset and the field.
func Parse(name string, data []byte) (Preset, error) {
	p := Preset{Name: name}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return p, fmt.Errorf("%w %s: %v (a preset is {\"about\": \"...\", \"config\": {...}})", ErrPreset, name, err)
	}
	if dec.More() {
		return p, fmt.Errorf("%w %s: more than one JSON value", ErrPreset, name)
	}
	if len(f.Config) == 0 || bytes.Equal(bytes.TrimSpace(f.Config), []byte("null")) {
		return p, fmt.Errorf("%w %s: no \"config\" object", ErrPreset, name)
	}
	if _, err := engine.ParseConfig(f.Config); err != nil {
		return p, fmt.Errorf("%w %s: %w", ErrPreset, name, err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(f.Config, &fields); err != nil {
		return p, fmt.Errorf("%w %s: %v", ErrPreset, name, err)
	}
	for _, k := range notInPresets {
		if _, ok := fields[k]; ok {
			return p, fmt.Errorf("%w %s: sets %q, which names a run rather than tunes it; presets may not set %s",
				ErrPreset, name, k, strings.Join(notInPresets, ", "))
		}
	}
	p.About, p.Config = f.About, f.Config
	return p, nil
}

// Get returns the embedded preset called name ("ppo/Pendulum-v1").
func Get(name string) (Preset, error) {
	algo, env, ok := strings.Cut(name, "/")
	if !ok || algo == "" || env == "" || strings.Contains(env, "/") {
		return Preset{}, fmt.Errorf("%w %q: a preset is named ALGO/ENV (e.g. ppo/Pendulum-v1), none to use no preset, or a path to a .json file; known: %s",
			ErrPreset, name, strings.Join(Names(), ", "))
	}
	data, err := files.ReadFile(algo + "/" + env + ".json")
	if err != nil {
		return Preset{}, fmt.Errorf("%w %q does not exist; known: %s", ErrPreset, name, strings.Join(Names(), ", "))
	}
	p, err := Parse(name, data)
	p.Algo, p.Env = algo, env
	return p, err
}

// Load reads a preset from a file outside the binary (same layout as the embedded ones).
func Load(path string) (Preset, error) {
	data, err := bounded.ReadFile("preset", path, bounded.ConfigLimit)
	if err != nil {
		return Preset{}, fmt.Errorf("%w: %w", ErrPreset, err)
	}
	return Parse(path, data)
}

// Names lists the embedded presets, sorted.
func Names() []string {
	var names []string
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path.Ext(p) == ".json" {
			names = append(names, strings.TrimSuffix(p, ".json"))
		}
		return nil
	})
	slices.Sort(names)
	return names
}

// All parses every embedded preset.
func All() ([]Preset, error) {
	var out []Preset
	var errs []error
	for _, n := range Names() {
		p, err := Get(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// For returns the preset of algo (or of the algorithm it [Shares] presets with) for env, and
// whether there is one. There is none for an env that is not registered. algo "" is ppo.
func For(algo, env string) (Preset, bool, error) {
	if algo == "" {
		algo = "ppo"
	}
	if _, err := envs.Lookup(env); err != nil {
		return Preset{}, false, nil
	}
	for _, a := range []string{algo, Shares[algo]} {
		if a == "" {
			continue
		}
		if _, err := fs.Stat(files, a+"/"+env+".json"); err != nil {
			continue
		}
		p, err := Get(a + "/" + env)
		return p, err == nil, err
	}
	return Preset{}, false, nil
}

// Choose returns the preset a run uses: for name "", the preset of (algo, env) ([For]) —
// none for a fine-tune (fineTune: an InitPolicy is given; its policy keeps its own
// architecture and normalisation unless a preset is named); for "none", none; for a name
// ending in ".json", that file ([Load]); otherwise the embedded preset so named ([Get]),
// "ENV" alone meaning algo's.
func Choose(name, algo, env string, fineTune bool) (Preset, bool, error) {
	switch {
	case name == "":
		if fineTune {
			return Preset{}, false, nil
		}
		return For(algo, env)
	case name == None:
		return Preset{}, false, nil
	case strings.HasSuffix(name, ".json"):
		p, err := Load(name)
		return p, err == nil, err
	case !strings.Contains(name, "/"):
		if algo == "" {
			algo = "ppo"
		}
		name = algo + "/" + name
	}
	p, err := Get(name)
	return p, err == nil, err
}

// Base returns the preset's fields as the engine.Config a run starts from, before its own
// config file and flags (engine.ParseConfigOver).
func (p Preset) Base() (engine.Config, error) {
	c, err := engine.ParseConfig(p.Config)
	if err != nil {
		return c, fmt.Errorf("%w %s: %w", ErrPreset, p.Name, err)
	}
	c.Preset = p.Name
	return c, nil
}
