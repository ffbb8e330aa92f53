package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/policy"
)

// Fine-tuning a foreign policy with an off-policy algorithm (train --algo dqn|sac
// --init-policy): the graph's network — a plain MLP, a Q-network for dqn or a SAC actor for
// sac — is read into the learner's native network (policy.ImportDense), which trains as a run
// from scratch would (the batchers act with its native export); policy.onnx is the original
// graph with the trained weights, its names, opset and batch kept. SAC's critics are new: they
// take CriticWarmup updates alone before the actor moves.

// fineTuneAlpha is the α a fine-tune's automatic tuning starts from, where a run from scratch
// starts from 1 (SB3's "auto"): a trained actor acts with little entropy, and α = 1 weighs
// entropy so far above the new critics' differences between actions that the actor's σ grows
// to its bound at once (SB3's SAC Pendulum actor, −224 over 100 episodes, fell to −1431 within
// 2000 steps). From 0.05 the tuning moves α as it would any other value (the SB3 actor's run
// took it to 0.11 within 8000 steps).
const fineTuneAlpha = 0.05

// importInit reads the InitPolicy's network from initData into s (the learner's shape and
// starting parameters) and keeps it for policy.onnx.
func (r *replayRun) importInit(initData []byte, s *algo.ReplaySettings) error {
	d, err := policy.ImportDense(initData, r.hb)
	if err != nil {
		return fmt.Errorf("engine: fine-tuning %s with --algo %s: %w", r.cfg.InitPolicy, r.cfg.Algo, err)
	}
	if err := r.cfg.sameNetwork(d); err != nil {
		return err
	}
	s.Hidden, s.Activation = d.Hidden(), d.ActivationName()
	s.Init = &algo.InitNet{Params: d.Params, LogStdMin: d.LogStdMin, LogStdMax: d.LogStdMax, CriticWarmup: max(r.cfg.CriticWarmup, 0),
		InitAlpha: fineTuneAlpha}
	r.init, r.initData = d, initData
	if log := r.opts.Session.Logger; log != nil {
		msg := "fine-tuning a foreign policy: " + strings.Join(d.Notes, "; ")
		if r.cfg.Algo == "sac" {
			msg += fmt.Sprintf("; new critics, trained alone for the first %d updates (critic_warmup)", max(r.cfg.CriticWarmup, 0))
		}
		log.Info(msg)
	}
	return nil
}

// sameNetwork refuses hidden or activation (given, or from a preset) other than the network
// of the InitPolicy d: a fine-tune trains the policy's own network. The same ones are
// accepted, so a preset of the same network (RL Zoo's SAC presets and SB3's SAC actor are
// 256×256 ReLU) tunes the rest of the run.
func (c Config) sameNetwork(d *policy.Dense) error {
	if (len(c.Hidden) == 0 || slices.Equal(c.Hidden, d.Hidden())) && (c.Activation == "" || c.Activation == d.ActivationName()) {
		return nil
	}
	return fmt.Errorf("%w: hidden %v and activation %q (given, or from --preset) differ from the network of init_policy %s, %v %s: a fine-tune trains the policy's own network; drop them, or pass the preset's other settings in a --config file",
		ErrConfig, c.Hidden, c.Activation, c.InitPolicy, d.Hidden(), d.ActivationName())
}

// policyModel is policy.onnx: the acting network's export, or a fine-tune's original graph
// with the trained weights.
func (r *replayRun) policyModel() ([]byte, error) {
	if r.init != nil {
		return r.init.WriteBack(r.l.Acting())
	}
	return r.l.Export(r.hb.Spec, r.version)
}
