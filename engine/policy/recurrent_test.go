package policy

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// TestRecurrentTowerReplaysTheBatchers: for each recurrent exporter family, the unrolled
// training graph, replaying a rollout the batchers (ONNX Runtime) collected from each env's
// recorded initial state, recomputes every row's log-probability (so PPO's first ratios are
// 1), with episodes ending inside the rollout (the state reset) and the rollouts cut into
// sequences that start from the states the batchers recorded; and its gradient through time
// matches finite differences of its loss.
func TestRecurrentTowerReplaysTheBatchers(t *testing.T) {
	for _, name := range []string{"rllib_cartpole_lstm", "sf_cartpole_gru", "sb3c_recurrentppo_cartpole"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "foreign", name+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			const envID, workers, perWorker, steps = "CartPoleNoVel-v1", 2, 3, 40
			es, err := envs.Lookup(envID)
			if err != nil {
				t.Fatal(err)
			}
			hs := envHeadSpec(t, envID)
			f, err := loadForeign(context.Background(), data, hs, layout.Overrides{}, onnx.Config{}, rand.New(rand.NewPCG(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if !f.recurrent() {
				t.Fatal("not recognised as recurrent")
			}
			// Noise on the weights: episodes end within the rollout, and the ratios test
			// more than the exporter's own numbers.
			rng := rand.New(rand.NewPCG(5, 6))
			for i := range f.flat {
				f.flat[i] += float32(rng.NormFloat64() * 0.3)
			}
			const seqLen = 10 // each env's rollout cut into 4 sequences, replayed from the recorded states
			model, err := f.Export(1)
			if err != nil {
				t.Fatal(err)
			}
			pc := bind.Config{Names: f.Binding().Names}
			ctx := context.Background()
			pol, err := bind.New(ctx, model, 1, es, pc)
			if err != nil {
				t.Fatal(err)
			}
			b, err := batcher.New(ctx, batcher.Config{Env: es, Workers: workers, EnvsPerWorker: perWorker, Steps: steps, Seed: 3}, pol)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			r, err := b.Collect(ctx, steps)
			if err != nil {
				t.Fatal(err)
			}
			ends := 0
			for _, d := range r.Terminated[:(steps-1)*r.N] {
				if d != 0 {
					ends++
				}
			}
			if ends == 0 {
				t.Fatal("no episode ended inside the rollout: the state resets are not tested")
			}
			n := r.N
			mb := sequenceBatch(t, r, f.States(), seqLen, rng)
			c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
			seqs := n * steps / seqLen
			// The whole gradient, for the finite differences: a new critic's own gradient
			// stops at the features it reads (graph.BuildOptions.StopGradient, tested there).
			f.stop = nil
			tw, err := newRecurrentTower(f, seqs, seqLen, &ppo.PPO{Coefs: c})
			if err != nil {
				t.Fatal(err)
			}
			defer tw.Close()
			grads := make([]float32, len(f.flat))
			stats := make([]float64, len(ppo.StatNames))
			if err := tw.Grad(mb, grads, stats); err != nil {
				t.Fatal(err)
			}
			// The rollout row of loss row k: sequence seq = k%seqs is env seq/4's steps
			// (seq%4)·10 ..., and k/seqs the step within it.
			rolloutRow := func(k int) int {
				seq := k % seqs
				return ((seq%(steps/seqLen))*seqLen+k/seqs)*n + seq/(steps/seqLen)
			}
			worst, worstV := 0.0, 0.0
			for k, lp := range tw.loss.loss.LogProbs() {
				worst = math.Max(worst, math.Abs(float64(lp-r.LogP[rolloutRow(k)])))
			}
			for k, v := range tw.loss.value.Value().Data().([]float32) {
				worstV = math.Max(worstV, math.Abs(float64(v-r.Values[rolloutRow(k)])))
			}
			t.Logf("%d episode ends inside the rollout; worst |log-probability − batcher's| %.2g, |value − batcher's| %.2g", ends, worst, worstV)
			if worst > 1e-4 || worstV > 1e-4 {
				t.Errorf("the replay's log-probabilities and values differ from the batchers' by up to %.3g and %.3g", worst, worstV)
			}
			loss := func() float64 {
				st := make([]float64, len(ppo.StatNames))
				if err := tw.Grad(mb, make([]float32, len(f.flat)), st); err != nil {
					t.Fatal(err)
				}
				return st[0]
			}
			checkFiniteDifferences(t, f, grads, loss, 1e-2, 0.05)
		})
	}
}
