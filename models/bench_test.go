package models

import (
	"testing"

	G "gorgonia.org/gorgonia"
)

// BenchmarkPPOStep is the learner's unit of work: one forward and backward pass of the
// CleanRL CartPole actor-critic (obs 4, 2 actions, separate 64×64 tanh trunks) on a minibatch
// of 512 with a PPO-like loss, then reading the flat gradient (Policy.Grads), which the learner
// feeds to its own Adam on the flat parameters ("noadam"); "adam=gorgonia" adds a step of
// gorgonia's Adam solver over the parameter nodes instead. Run it on one core:
//
//	go test ./models -run '^$' -bench PPOStep -cpu 1 -count 3
func BenchmarkPPOStep(b *testing.B) {
	const batch = 512
	for _, adam := range []bool{false, true} {
		name := "noadam" // forward, backward and Grads: the tower's share of a PPO update
		if adam {
			name = "adam=gorgonia"
		}
		b.Run(name, func(b *testing.B) {
			params := newParams(b, cartPole, 1)
			tr := newTrainer(b, params, batch)
			tr.fill(b, 1, 0)
			solver := G.NewAdamSolver(G.WithLearnRate(2.5e-4))
			grads := G.NodesToValueGrads(tr.pol.Params)
			flat := make([]float32, params.Size())
			b.ReportAllocs()
			for b.Loop() {
				if err := tr.pol.Run(); err != nil {
					b.Fatal(err)
				}
				if adam {
					if err := solver.Step(grads); err != nil {
						b.Fatal(err)
					}
				} else if err := tr.pol.Grads(flat); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkForward is the forward pass alone (inference on the gorgonia side) at batch 512.
func BenchmarkForward(b *testing.B) {
	const batch = 512
	params := newParams(b, cartPole, 1)
	pol, err := Build(G.NewGraph(), params, batch)
	if err != nil {
		b.Fatal(err)
	}
	defer pol.Close()
	if err := pol.Compile(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := pol.Run(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
}
