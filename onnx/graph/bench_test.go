package graph_test

import (
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/models"
	policyhead "github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/graph"
)

// BenchmarkTrainStep compares one learner step, forward and backward with the flat gradient
// read out, of the same network built natively (package models) and imported from its ONNX
// export: CleanRL's CartPole actor-critic (obs 4, 2 actions, separate 64×64 tanh trunks) on
// a minibatch of 512 with the loss Σ logits² + Σ value². Both in one run:
//
//	go test ./onnx/graph -run '^$' -bench TrainStep -cpu 1 -count 3
func BenchmarkTrainStep(b *testing.B) {
	const batch = 512
	cfg := models.Config{Spec: policyhead.Spec{Head: policyhead.CategoricalKind, N: 2, ObsShape: []int{4}, EnvID: "CartPole-v1"}}
	params, err := models.NewParams(cfg, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	obs := make([]float32, batch*4)
	rng := rand.New(rand.NewPCG(2, 2))
	for k := range obs {
		obs[k] = float32(rng.NormFloat64())
	}
	squares := func(ns ...*G.Node) *G.Node {
		var loss *G.Node
		for _, n := range ns {
			s := G.Must(G.Sum(G.Must(G.Square(n))))
			if loss == nil {
				loss = s
			} else {
				loss = G.Must(G.Add(loss, s))
			}
		}
		return loss
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "samples/s")
	}
	b.Run("native", func(b *testing.B) {
		pol, err := models.Build(G.NewGraph(), params, batch)
		if err != nil {
			b.Fatal(err)
		}
		defer pol.Close()
		if err := pol.Backward(squares(pol.Logits, pol.Value)); err != nil {
			b.Fatal(err)
		}
		if err := pol.Compile(); err != nil {
			b.Fatal(err)
		}
		copy(pol.ObsData(), obs)
		grads := make([]float32, params.Size())
		b.ReportAllocs()
		for b.Loop() {
			if err := pol.Run(); err != nil {
				b.Fatal(err)
			}
			if err := pol.Grads(grads); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	data, err := models.Export(params, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, noFusion := range []bool{false, true} {
		name := "imported"
		if noFusion {
			name = "imported-nofusion"
		}
		b.Run(name, func(b *testing.B) {
			m, err := graph.Parse(data)
			if err != nil {
				b.Fatal(err)
			}
			p := m.NewParams()
			flat, err := p.Flat()
			if err != nil {
				b.Fatal(err)
			}
			g := G.NewGraph()
			gr, err := m.BuildWith(g, p, graph.BuildOptions{Batch: batch, NoFusion: noFusion})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := G.Grad(squares(gr.Outputs()...), gr.Learnables()...); err != nil {
				b.Fatal(err)
			}
			vm := G.NewTapeMachine(g, G.BindDualValues(gr.Learnables()...))
			defer vm.Close()
			x := tensor.New(tensor.WithShape(batch, 4), tensor.WithBacking(obs))
			grads := make([]float32, len(flat))
			b.ReportAllocs()
			for b.Loop() {
				if err := G.Let(gr.Inputs()[0], x); err != nil {
					b.Fatal(err)
				}
				vm.Reset()
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
				if err := gr.Gradients(grads); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}
