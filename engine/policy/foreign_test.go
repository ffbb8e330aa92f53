package policy

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/engine/internal/enginetest"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// TestForeignTowerLossAndGradient: the PPO tower over the imported PyTorch CartPole policy
// computes the same loss as the float64 reference on ONNX Runtime, and gradients that match
// its finite differences, for every parameter tensor (untied biases included).
func TestForeignTowerLossAndGradient(t *testing.T) {
	data, err := os.ReadFile("../../testdata/mlp_tanh.onnx")
	if err != nil {
		t.Fatal(err)
	}
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	f, err := loadForeign(context.Background(), data, spec, layout.Overrides{}, onnx.Config{}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range f.flat {
		f.flat[i] += float32(rng.NormFloat64() * 0.2)
	}
	const n = 24
	mb := enginetest.RandomMinibatch(rng, n, 2, enginetest.Scales{Ret: 3, Value: 1, LogP: 0.3})
	c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	tw, err := newForeignTower(f, n, &ppo.PPO{Coefs: c})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	if err := tape.Check(); err == nil && !tw.vm.Fast() {
		t.Error("the imported graph's tape runs through RunAll, not on the calling goroutine")
	}
	grads := make([]float32, len(f.flat))
	stats := make([]float64, len(ppo.StatNames))
	if err := tw.Grad(mb, grads, stats); err != nil {
		t.Fatal(err)
	}
	ref := func() float64 {
		b, err := f.Export(0)
		if err != nil {
			t.Fatal(err)
		}
		return refLossOf(t, b, spec, mb, c)
	}
	if want := ref(); math.Abs(stats[0]-want) > 1e-5*math.Max(1, math.Abs(want)) {
		t.Fatalf("loss %.7f, reference %.7f", stats[0], want)
	}
	checkFiniteDifferences(t, f, grads, ref, 1e-3, 0.02)
}

// checkFiniteDifferences compares grads with central differences of loss, moving three
// entries (first, middle, last) of every trainable parameter of f by ±eps, within
// 2e-3 + rel·|fd|.
func checkFiniteDifferences(t *testing.T, f *Foreign, grads []float32, loss func() float64, eps, rel float64) {
	t.Helper()
	off := 0
	for _, name := range f.params.TrainableNames() {
		v, _ := f.params.Value(name)
		size := v.Shape().TotalSize()
		for _, k := range []int{off, off + size/2, off + size - 1} {
			old := f.flat[k]
			f.flat[k] = old + float32(eps)
			up := loss()
			f.flat[k] = old - float32(eps)
			down := loss()
			f.flat[k] = old
			fd := (up - down) / (2 * eps)
			if math.Abs(fd-float64(grads[k])) > 2e-3+rel*math.Abs(fd) {
				t.Errorf("%s[%d]: gradient %.6f, finite difference %.6f", name, k-off, grads[k], fd)
			}
		}
		off += size
	}
}

// TestForeignSACLogStdKept: SB3's SAC actor is fine-tuned over its mean only. The loss reads
// its log_std without a gradient (a stopped tensor), the log_std layer's parameters are frozen,
// and the trunk and the mean layer train.
func TestForeignSACLogStdKept(t *testing.T) {
	data, err := os.ReadFile("../../testdata/foreign/sb3_sac_pendulum.onnx")
	if err != nil {
		t.Fatal(err)
	}
	spec := envHeadSpec(t, "Pendulum-v1")
	f, err := loadForeign(context.Background(), data, spec, layout.Overrides{}, onnx.Config{}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if f.bind.Head != head.TanhGaussianKind || f.outs.logStd == "" {
		t.Fatalf("bound as %s with log_std %q, want a tanh-gaussian with its log_std", f.bind.Head, f.outs.logStd)
	}
	if !slices.Contains(f.stop, f.outs.logStd) {
		t.Errorf("stopped tensors %v, want the log_std %q among them", f.stop, f.outs.logStd)
	}
	trainable := f.params.TrainableNames()
	for _, name := range []string{"actor.log_std.weight", "actor.log_std.bias"} {
		if slices.Contains(trainable, name) || !slices.Contains(f.params.Frozen(), name) {
			t.Errorf("%s is trainable; the log_std layer must stay frozen", name)
		}
	}
	for _, name := range []string{"actor.latent_pi.0.weight", "actor.latent_pi.2.bias", "actor.mu.weight", "actor.mu.bias"} {
		if !slices.Contains(trainable, name) {
			t.Errorf("%s is frozen; the trunk and the mean train (trainable: %v)", name, trainable)
		}
	}
	// The tower builds and differentiates with the stopped log_std.
	tw, err := newForeignTower(f, 8, &ppo.PPO{Coefs: ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, VfCoef: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	mb := learner.NewSampleBatch(8, 3, 1, 0)
	for i := range 8 {
		for j := range 3 {
			mb.Obs[i*3+j] = float32(rng.NormFloat64())
		}
		mb.Actions[i] = float32(rng.NormFloat64())
		mb.Advantages[i], mb.Returns[i], mb.Values[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*3), float32(rng.NormFloat64())
		mb.LogP[i] = float32(rng.NormFloat64() * 0.3)
	}
	if err := mb.SetLen(8); err != nil {
		t.Fatal(err)
	}
	grads := make([]float32, len(f.flat))
	if err := tw.Grad(mb, grads, make([]float64, len(ppo.StatNames))); err != nil {
		t.Fatal(err)
	}
	if slices.Max(grads) == 0 && slices.Min(grads) == 0 {
		t.Error("all gradients are zero")
	}
}
