package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/towerrl/towerrl/internal/names"
)

// ParseConfig decodes a JSON object of Config fields strictly: a field Config does not have
// is an error naming it and the nearest known field ("total_step": did you mean
// "total_steps"?), as is anything after the object. Defaults are not applied, but an
// "ent_coef" of 0 given explicitly means no entropy bonus (it is stored as -1, which
// WithDefaults keeps at 0), as in Stable-Baselines3's configs, instead of the default.
func ParseConfig(data []byte) (Config, error) {
	return ParseConfigOver(Config{}, data)
}

// ParseConfigOver decodes a JSON object of Config fields over base, as ParseConfig does: the
// fields data holds replace base's (an explicit false or 0 too), the others keep base's
// values. It layers a config file over a preset (package engine/preset).
func ParseConfigOver(base Config, data []byte) (Config, error) {
	c := base
	c.Hidden = slices.Clone(base.Hidden) // decoding an array reuses the slice's memory
	if err := checkKeys(data); err != nil {
		return c, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		const prefix = "json: unknown field "
		if msg := err.Error(); strings.HasPrefix(msg, prefix) {
			name, _ := strconv.Unquote(strings.TrimPrefix(msg, prefix))
			hint, ok := configAliases[strings.ToLower(name)]
			if ok {
				hint = fmt.Sprintf("; towerrl calls it %q", hint)
			} else {
				hint = suggest(name, configFields())
			}
			return c, fmt.Errorf("%w: unknown field %q%s", ErrConfig, clip(name), hint)
		}
		return c, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if dec.More() {
		return c, fmt.Errorf("%w: more than one JSON value; a config is one object", ErrConfig)
	}
	explicitZeros(data, &c)
	return c, nil
}

// checkKeys refuses what encoding/json lets through in a config object: a key given twice
// (the last would win unseen), a key that matches a field only when case is ignored
// ("Total_Steps"), and a string value longer than a name or path can be (it would be echoed
// into errors and logs). Other errors are left to the decoder, which names them.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil // not an object: the decoder says so
	}
	fields := configFields()
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("%w: field %q is given twice; give each field once", ErrConfig, clip(key))
		}
		seen[key] = true
		if !slices.Contains(fields, key) {
			for _, f := range fields {
				if strings.EqualFold(f, key) {
					return fmt.Errorf("%w: field %q: field names are lower case; did you mean %q?", ErrConfig, clip(key), f)
				}
			}
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil
		}
		if len(value) > maxString+2 && value[0] == '"' {
			return fmt.Errorf("%w: field %q holds a string of %d bytes, more than the %d a name or path may have", ErrConfig, clip(key), len(value)-2, maxString)
		}
	}
	return nil
}

// maxString bounds a config's string values: names, ids and paths (PATH_MAX is 4096).
const maxString = 4096

// clip shortens s to at most 64 bytes for an error message: a config's 100 MB value must not
// be echoed whole.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:most], ""), len(s))
}

// explicitZeros applies to c, decoded from data, what a zero written in the JSON means where
// it differs from "the default": an "ent_coef" of 0 is no entropy bonus (-1), an
// "exploration_final_eps" of 0 a greedy end to DQN's schedule (-1), a "learning_starts" of 0
// learning from the first collection on (-1). Every config
// read back (config.json, a checkpoint's) goes through it, so a run and its resume agree.
func explicitZeros(data []byte, c *Config) {
	var given struct {
		EntCoef  *float64 `json:"ent_coef"`
		FinalEps *float64 `json:"exploration_final_eps"`
		Starts   *int64   `json:"learning_starts"`
	}
	if json.Unmarshal(data, &given) != nil {
		return
	}
	if given.EntCoef != nil && *given.EntCoef == 0 {
		c.EntCoef = -1
	}
	if given.FinalEps != nil && *given.FinalEps == 0 {
		c.ExplorationFinalEps = -1 // DQN's greedy end (a 0 would take the default)
	}
	if given.Starts != nil && *given.Starts == 0 {
		c.LearningStarts = -1 // learning from the first collection on (SB3's learning_starts 0)
	}
}

// configAliases maps Stable-Baselines3's and CleanRL's names for PPO settings to Config's.
var configAliases = map[string]string{
	"learning_rate": "lr", "n_steps": "rollout_steps", "num_steps": "rollout_steps", "num_envs": "envs",
	"n_envs": "envs", "n_epochs": "epochs", "update_epochs": "epochs", "num_minibatches": "minibatches",
	"clip_range": "clip_coef", "log_std_init": "logstd_init", "total_timesteps": "total_steps", "seed_": "seed", "env_id": "env",
}

// configFields lists Config's JSON field names.
func configFields() []string {
	t := reflect.TypeFor[Config]()
	names := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// suggest returns `; did you mean "x"?` for the known name nearest to name (edit distance at
// most a third of its length, or a shared word), else the list of known names.
func suggest(name string, known []string) string {
	best, bestD := "", len(name)/3+1
	for _, k := range known {
		if d := names.Distance(strings.ToLower(name), k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		for _, k := range known {
			for _, w := range strings.Split(strings.ToLower(name), "_") {
				if len(w) > 2 && strings.Contains(k, w) {
					best = k
					break
				}
			}
			if best != "" {
				break
			}
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return "; known fields: " + strings.Join(known, ", ")
}
