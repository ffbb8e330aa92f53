package onnx

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	ort "github.com/yalue/onnxruntime_go"
)

func report(b *testing.B, batch int) {
	per := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(per*1e6, "µs/call")
	b.ReportMetric(float64(batch)/per, "samples/s")
}

// BenchmarkSessionRun times Session.Run on the 64x64 tanh MLP actor-critic (one intra-op
// thread) next to the same model called directly through onnxruntime_go's AdvancedSession
// with fixed tensors, the fastest unwrapped path, so the wrapper's overhead shows.
func BenchmarkSessionRun(b *testing.B) {
	for _, batch := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("towerrl/batch=%d", batch), func(b *testing.B) {
			s := open(b, "mlp_tanh", Config{MaxBatch: batch})
			in, _ := Input[float32](s, 0)
			for i := range in {
				in[i] = float32(i%13) * 0.05
			}
			if err := s.Run(batch); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Run(batch); err != nil {
					b.Fatal(err)
				}
			}
			report(b, batch)
		})
		b.Run(fmt.Sprintf("onnxruntime_go/batch=%d", batch), func(b *testing.B) {
			if err := Init(""); err != nil {
				b.Fatal(err)
			}
			data := make([]float32, batch*4)
			for i := range data {
				data[i] = float32(i%13) * 0.05
			}
			in, _ := ort.NewTensor(ort.NewShape(int64(batch), 4), data)
			logits, _ := ort.NewEmptyTensor[float32](ort.NewShape(int64(batch), 2))
			value, _ := ort.NewEmptyTensor[float32](ort.NewShape(int64(batch), 1))
			defer in.Destroy()
			defer logits.Destroy()
			defer value.Destroy()
			opts, _ := ort.NewSessionOptions()
			opts.SetIntraOpNumThreads(1)
			opts.SetInterOpNumThreads(1)
			defer opts.Destroy()
			sess, err := ort.NewAdvancedSession(filepath.Join(fixtures, "mlp_tanh.onnx"), []string{"obs"},
				[]string{"logits", "value"}, []ort.Value{in}, []ort.Value{logits, value}, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer sess.Destroy()
			b.ReportAllocs()
			for b.Loop() {
				if err := sess.Run(); err != nil {
					b.Fatal(err)
				}
			}
			report(b, batch)
		})
	}
}

// BenchmarkFedWeights times Session.Run on the 64×64 tanh MLP with its weights as the model's
// constants (today's session, pre-packed by ONNX Runtime) next to the same weights fed from
// caller buffers (Config.Weights), and fed with a switch to the other of two sets before
// every Run (the worst case of a publish per step: each switch rebinds the nine weights).
// The cases run one after the other, so load on a shared machine falls on them unevenly;
// batcher's BenchmarkPublishInference compares constant and fed call by call.
//
//	go test ./onnx -run '^$' -bench FedWeights -count 5
func BenchmarkFedWeights(b *testing.B) {
	_, data := readModel(b, "mlp_tanh")
	defaults, err := WeightValues(data, mlpWeights)
	if err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{1, 64, 1024} {
		for _, mode := range []string{"constant", "fed", "fed+switch"} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, mode), func(b *testing.B) {
				cfg := Config{MaxBatch: batch}
				if mode != "constant" {
					cfg.Weights = mlpWeights
				}
				s := newSession(b, data, cfg)
				var sets []*Weights
				if mode != "constant" {
					for range 2 {
						w, err := s.NewWeights(perturbed(defaults, rand.New(rand.NewPCG(1, 2)), 0))
						if err != nil {
							b.Fatal(err)
						}
						sets = append(sets, w)
					}
					if err := s.UseWeights(sets[0]); err != nil {
						b.Fatal(err)
					}
				}
				in, _ := Input[float32](s, 0)
				for i := range in {
					in[i] = float32(i%13) * 0.05
				}
				if err := s.Run(batch); err != nil {
					b.Fatal(err)
				}
				k := 0
				b.ReportAllocs()
				for b.Loop() {
					if mode == "fed+switch" {
						k++
						if err := s.UseWeights(sets[k%2]); err != nil {
							b.Fatal(err)
						}
					}
					if err := s.Run(batch); err != nil {
						b.Fatal(err)
					}
				}
				report(b, batch)
			})
		}
	}
}

// BenchmarkFirstNaN32 is Run's NaN check over a CartPole batcher's input: 1,024 rows of 4
// observations, none NaN.
//
//	go test ./onnx -run '^$' -bench FirstNaN32
func BenchmarkFirstNaN32(b *testing.B) {
	x := make([]float32, 1024*4)
	for i := range x {
		x[i] = float32(i%97) - 48
	}
	for b.Loop() {
		if firstNaN32(x) >= 0 {
			b.Fatal("a NaN")
		}
	}
}
