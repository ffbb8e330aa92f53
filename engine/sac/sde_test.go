package sac

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
	policyhead "github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// sdeWant is gSDE's mean clip(μ) and its noise's log std ½·log(z²·σ² + 10⁻⁶) for row r of the
// Go forward pass, and the acting mean clip(μ) + z·W.
func sdeWant(s *SAC, z, mu []float32, r, j int) (mean, logStd, acting float64) {
	a, l := s.actDim, s.sde.latent
	mean = min(max(float64(mu[r*a+j]), -s.sde.clip), s.sde.clip)
	var v, noise float64
	for k := range l {
		zk := float64(z[r*l+k])
		sig := math.Exp(float64(s.sdeLogStd()[k*a+j]))
		v += zk * zk * sig * sig
		noise += zk * float64(s.sde.actW[k*a+j])
	}
	return mean, 0.5 * math.Log(v+1e-6), mean + noise
}

// TestSDEExport: with gSDE, ONNX Runtime runs the actor's export (policy.onnx) to the clipped
// mean and the noise's log std given the state, and the acting graph to the clipped mean plus
// z·W with a log std of −30, against the Go forward pass, on rows on both sides of the clip.
func TestSDEExport(t *testing.T) {
	const obsDim, actDim, rows = 5, 2, 41
	rng := rand.New(rand.NewPCG(5, 6))
	s, err := New(Config{Hidden: []int{12, 7}, Minibatch: 4, UseSDE: true, LogStdInit: -1, ClipMean: 0.4}, obsDim, actDim, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range s.actor.NumParams() { // larger weights than the initialisation, so that the clip bites
		s.actorP[i] *= 3
	}
	for k := range s.sdeLogStd() { // a log σ of its own in every cell, so that the layout counts
		s.sdeLogStd()[k] = float32(-1 + 0.1*rng.NormFloat64())
	}
	s.ResampleActingNoise(rng)
	spec := policyhead.Spec{EnvID: "Test-v0", ObsShape: []int{obsDim}, Low: []float32{-2, 0}, High: []float32{2, 5}}
	obs := make([]float32, rows*obsDim)
	for i := range obs {
		obs[i] = float32(rng.NormFloat64() * 2)
	}
	w := s.actor.NewWork(rows)
	copy(w.In(), obs)
	s.actor.Forward(s.actorP, w)
	for _, acting := range []bool{false, true} {
		export, what := s.ExportActor, "the actor's export"
		if acting {
			export, what = s.ExportActing, "the acting graph"
		}
		model, err := export(spec, 3)
		if err != nil {
			t.Fatal(err)
		}
		sess, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: rows})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if got, ok, err := policyhead.FromMetadata(sess.Metadata()); err != nil || !ok || got.Head != policyhead.TanhGaussianKind || got.Version != 3 {
			t.Fatalf("%s: metadata %+v %v %v", what, got, ok, err)
		}
		if _, err := onnx.Feed(sess, 0, []int64{rows, obsDim}, obs); err != nil {
			t.Fatal(err)
		}
		if err := sess.Run(rows); err != nil {
			t.Fatal(err)
		}
		mi, _ := sess.OutputIndex("mean")
		li, _ := sess.OutputIndex("log_std")
		mean, _ := onnx.Output[float32](sess, mi)
		logStd, _ := onnx.Output[float32](sess, li)
		clipped := 0
		for r := range rows {
			for j := range actDim {
				m, ls, act := sdeWant(s, w.Latent(), w.Out(), r, j)
				if m != float64(w.Out()[r*actDim+j]) {
					clipped++
				}
				if acting {
					m, ls = act, actingLogStd
				}
				if g := float64(mean[r*actDim+j]); math.Abs(g-m) > 1e-5*max(1, math.Abs(m)) {
					t.Fatalf("%s: mean[%d][%d] = %v, the Go forward pass gives %v", what, r, j, g, m)
				}
				if g := float64(logStd[r*actDim+j]); math.Abs(g-ls) > 1e-4*max(1, math.Abs(ls)) {
					t.Fatalf("%s: log_std[%d][%d] = %v, the Go forward pass gives %v", what, r, j, g, ls)
				}
			}
		}
		if clipped == 0 || clipped == rows*actDim {
			t.Errorf("%d of %d means clipped: the test does not reach both sides of the clip", clipped, rows*actDim)
		}
	}
}

// TestSDEBatcherActs: a batcher bound to the acting graph with PublishLayout acts, after a
// publish of Acting with a W drawn since the export, with a = tanh(clip(μ) + z·W) for every
// step of every env (the head's own draw vanishing), the W published and not the export's.
func TestSDEBatcherActs(t *testing.T) {
	ctx := context.Background()
	pend, err := envs.Lookup("Pendulum-v1")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 9))
	s, err := New(Config{Hidden: []int{16, 16}, Minibatch: 4, UseSDE: true, LogStdInit: -0.5, ClipMean: 0.3}, 3, 1, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.ResampleActingNoise(rng)
	spec := policyhead.Spec{EnvID: pend.ID, ObsShape: []int{3}, Low: []float32{-2}, High: []float32{2}}
	model, err := s.ExportActing(spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bind.New(ctx, model, 0, pend, bind.Config{Publish: s.PublishLayout()})
	if err != nil {
		t.Fatal(err)
	}
	const n, steps = 4, 30
	b, err := batcher.New(ctx, batcher.Config{Env: pend, EnvsPerWorker: n, Steps: steps, Seed: 3}, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	exported := slices.Clone(s.ActingNoise())
	s.ResampleActingNoise(rng)
	if slices.Equal(exported, s.ActingNoise()) {
		t.Fatal("a new draw of W equals the last")
	}
	if err := b.PublishExplore(ctx, 1, s.Acting(), 0); err != nil {
		t.Fatal(err)
	}
	r, err := b.Collect(ctx, steps)
	if err != nil {
		t.Fatal(err)
	}
	w := s.actor.NewWork(n * steps)
	copy(w.In(), r.Obs[:n*steps*3])
	s.actor.Forward(s.actorP, w)
	for i := range n * steps {
		_, _, u := sdeWant(s, w.Latent(), w.Out(), i, 0)
		if got := math.Tanh(float64(r.Actions[i])); math.Abs(got-math.Tanh(u)) > 1e-5 {
			t.Fatalf("row %d: the batcher's action tanh(%v) = %v, tanh(clip(μ) + z·W) = %v", i, r.Actions[i], got, math.Tanh(u))
		}
	}
}

// TestSDERefuses: gSDE's settings without UseSDE, a bounded log std with it, and an actor
// without a hidden layer are refused with errors naming them.
func TestSDERefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{LogStdInit: -3}, "set UseSDE"},
		{Config{ClipMean: 1}, "set UseSDE"},
		{Config{UseSDE: true, LogStd: Tanh}, "LogStd and its bounds"},
		{Config{UseSDE: true, LogStdMax: 1}, "LogStd and its bounds"},
		{Config{UseSDE: true, Hidden: []int{}}, "at least one"},
		{Config{UseSDE: true, LogStdInit: math.Inf(1)}, "finite"},
	} {
		if s, err := New(c.cfg, 3, 2, rng); err == nil || !strings.Contains(err.Error(), c.want) {
			if s != nil {
				s.Close()
			}
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
	s, err := New(Config{Hidden: []int{4}, Minibatch: 2}, 3, 2, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := slices.Clone(s.Acting())
	s.ResampleActingNoise(rng)
	if s.ActingNoise() != nil || !slices.Equal(before, s.Acting()) || !math.IsNaN(s.SDEStd()) {
		t.Error("without gSDE, ResampleActingNoise changed what the batchers act with, or gSDE's σ exists")
	}
}
