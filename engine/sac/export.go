package sac

import (
	"fmt"

	"github.com/towerrl/towerrl/models"
	policyhead "github.com/towerrl/towerrl/models/head"
)

// ExportActor writes the actor as an ONNX policy that the batchers, eval and a fine-tune bind
// with no flags: input "obs" [batch, obsDim], outputs "mean" and "log_std" [batch, actDim],
// the log std bounded in the graph as the update bounds it (clipped, or squashed by tanh into
// [LogStdMin, LogStdMax]), and spec's metadata with the tanh-gaussian head, which samples
// a = tanh(mean + exp(log_std)·ε) mapped onto the env's bounds; its deterministic action is
// tanh(mean), mapped. spec gives the env, the observation shape and the action space (its Head
// is set here); the layers are named actor.0, actor.1, …
func (s *SAC) ExportActor(spec policyhead.Spec, version int64) ([]byte, error) {
	spec.Head = policyhead.TanhGaussianKind
	obs := 1
	for _, d := range spec.ObsShape {
		obs *= d
	}
	if len(spec.ObsShape) == 0 || obs != s.obsDim || len(spec.Low) != s.actDim {
		return nil, fmt.Errorf("%w: exporting an actor of %d observations and %d actions with a spec of observation shape %v and %d action dimensions",
			ErrConfig, s.obsDim, s.actDim, spec.ObsShape, len(spec.Low))
	}
	g := models.NewDenseGraph(s.obsDim)
	out, err := s.actor.Export(g, s.actorP, models.InputObs, "actor")
	if err != nil {
		return nil, err
	}
	if err := g.Columns(out, models.OutputMean, 0, s.actDim); err != nil {
		return nil, err
	}
	if err := g.Columns(out, "log_std.raw", s.actDim, 2*s.actDim); err != nil {
		return nil, err
	}
	lo, hi := float32(s.cfg.LogStdMin), float32(s.cfg.LogStdMax)
	if s.cfg.LogStd == Tanh {
		err = g.TanhRange("log_std.raw", models.OutputLogStd, lo, hi)
	} else {
		err = g.Clip("log_std.raw", models.OutputLogStd, lo, hi)
	}
	if err != nil {
		return nil, err
	}
	return g.Marshal(spec, version, "sac/actor", models.OutputMean, models.OutputLogStd)
}
