package sac

import (
	"fmt"
	"math"
	"slices"

	"github.com/towerrl/towerrl/bind"
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
//
// With UseSDE, "mean" is the clipped mean and "log_std" gSDE's standard deviation of the
// noise given the state, ½·log(z²·σ² + 10⁻⁶) (z the features; see sde.go): the deterministic
// action is SB3's, and a sampled one has the noise's size, drawn afresh at every step (the
// batchers' smooth noise is ExportActing's).
func (s *SAC) ExportActor(spec policyhead.Spec, version int64) ([]byte, error) {
	g, latent, out, err := s.exportNet(&spec)
	if err != nil {
		return nil, err
	}
	switch {
	case s.sde != nil:
		if err = s.sdeMean(g, out, models.OutputMean); err == nil {
			err = s.exportSDEStd(g, latent)
		}
	default:
		if err = g.Columns(out, models.OutputMean, 0, s.actDim); err == nil {
			err = g.Columns(out, "log_std.raw", s.actDim, 2*s.actDim)
		}
		if err != nil {
			break
		}
		lo, hi := float32(s.cfg.LogStdMin), float32(s.cfg.LogStdMax)
		if s.cfg.LogStd == Tanh {
			err = g.TanhRange("log_std.raw", models.OutputLogStd, lo, hi)
		} else {
			err = g.Clip("log_std.raw", models.OutputLogStd, lo, hi)
		}
	}
	if err != nil {
		return nil, err
	}
	return g.Marshal(spec, version, "sac/actor", models.OutputMean, models.OutputLogStd)
}

// actingLogStd is the log std of ExportActing's graph: its noise is in its mean, and the
// head's own draw, exp(−30)·ε ≈ 10⁻¹³·ε, vanishes in float32 next to any mean above 10⁻⁶.
const actingLogStd = -30

// ExportActing writes the graph the batchers act with under gSDE (UseSDE; without it, the
// actor's export): ExportActor's with "mean" = clip(μ) + z·W, W the acting noise
// (ActingNoise, published in place with the network's weights as initializer "sde.weight",
// see PublishLayout), and "log_std" the constant actingLogStd, so that the tanh-gaussian
// head's sample is tanh(clip(μ) + z·W), mapped onto the env's bounds: the noise stays the
// same function of the state until W is drawn again.
func (s *SAC) ExportActing(spec policyhead.Spec, version int64) ([]byte, error) {
	if s.sde == nil {
		return s.ExportActor(spec, version)
	}
	g, latent, out, err := s.exportNet(&spec)
	if err != nil {
		return nil, err
	}
	m := len(s.sde.actW)
	ls := make([]float32, s.actDim)
	for j := range ls {
		ls[j] = actingLogStd
	}
	if err = s.sdeMean(g, out, "mean.clipped"); err == nil {
		_, err = g.Dense(latent, "sde", s.sde.actW, make([]float32, s.actDim), "")
	}
	if err == nil {
		err = g.Add("mean.clipped", "sde", models.OutputMean)
	}
	if err == nil {
		_, err = g.Dense(latent, models.OutputLogStd, make([]float32, m), ls, "")
	}
	if err != nil {
		return nil, err
	}
	return g.Marshal(spec, version, "sac/acting", models.OutputMean, models.OutputLogStd)
}

// PublishLayout places Acting's values in the acting graph (ExportActing): the actor's layers,
// and with UseSDE the acting W as "sde.weight" (log σ, between them in Acting, is not in the
// graph).
func (s *SAC) PublishLayout() []bind.Param {
	ps := s.actor.PublishLayout("actor")
	if s.sde != nil {
		ps = append(slices.Clip(ps), bind.Param{Name: "sde.weight", Offset: len(s.actorP), Len: len(s.sde.actW)})
	}
	return ps
}

// Acting is what the batchers act with, laid out as PublishLayout says: ActorParams, then with
// UseSDE the acting W (ActingNoise).
func (s *SAC) Acting() []float32 { return s.acting }

// exportNet checks spec against the actor, sets its head, and appends the actor's network to
// a new graph; it returns the graph, the features' value (the last hidden layer) and the
// network's output.
func (s *SAC) exportNet(spec *policyhead.Spec) (g *models.DenseGraph, latent, out string, err error) {
	spec.Head = policyhead.TanhGaussianKind
	obs := 1
	for _, d := range spec.ObsShape {
		obs *= d
	}
	if len(spec.ObsShape) == 0 || obs != s.obsDim || len(spec.Low) != s.actDim {
		return nil, "", "", fmt.Errorf("%w: exporting an actor of %d observations and %d actions with a spec of observation shape %v and %d action dimensions",
			ErrConfig, s.obsDim, s.actDim, spec.ObsShape, len(spec.Low))
	}
	g = models.NewDenseGraph(s.obsDim)
	latent, out, err = s.actor.ExportLatent(g, s.actorP[:s.actor.NumParams()], models.InputObs, "actor")
	return g, latent, out, err
}

// sdeMean makes name hold gSDE's mean: the network's output out clipped to ±ClipMean (out
// itself, renamed, when it is not clipped).
func (s *SAC) sdeMean(g *models.DenseGraph, out, name string) error {
	if c := float32(s.sde.clip); c > 0 {
		return g.Clip(out, name, -c, c)
	}
	return g.Rename(out, name)
}

// exportSDEStd appends gSDE's log std given the state, ½·log(z²·σ² + 10⁻⁶), as "log_std".
func (s *SAC) exportSDEStd(g *models.DenseGraph, latent string) error {
	sig2, bias := make([]float32, len(s.sdeLogStd())), make([]float32, s.actDim)
	for k, ls := range s.sdeLogStd() {
		sig2[k] = float32(math.Exp(2 * float64(ls)))
	}
	for j := range bias {
		bias[j] = 1e-6
	}
	if err := g.Square(latent, "sde.latent_sq"); err != nil {
		return err
	}
	if _, err := g.Dense("sde.latent_sq", "sde.variance", sig2, bias, ""); err != nil {
		return err
	}
	return g.HalfLog("sde.variance", models.OutputLogStd)
}
