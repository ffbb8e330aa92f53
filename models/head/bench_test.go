package head

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchRows is the batch of the sampling benchmarks: one worker's 1024 envs, as the batcher
// runs CartPole in issue 15.
const benchRows = 1024

// rowStreams is one random stream per row, as a batcher keeps one per env.
func rowStreams(n int) []*rand.Rand {
	rngs := make([]*rand.Rand, n)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(3, uint64(i)))
	}
	return rngs
}

// normals is n draws of N(0, σ²) from a fixed stream.
func normals(n int, sigma float64) []float32 {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(sigma * rng.NormFloat64())
	}
	return x
}

// reportRows reports the time per row of a benchmark that works rows rows per iteration.
func reportRows(b *testing.B, rows int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}

// BenchmarkCategoricalSampleRows samples a batch of 1024 rows, each from its own stream, with
// log-probabilities: 2 logits (CartPole) and 18 (Atari's full action set).
//
//	go test ./models/head -run '^$' -bench SampleRows -cpu 1
func BenchmarkCategoricalSampleRows(b *testing.B) {
	for _, n := range []int{2, 18} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			logits, rngs := normals(benchRows*n, 2), rowStreams(benchRows)
			acts, logp := make([]int32, benchRows), make([]float32, benchRows)
			c := Categorical{N: n}
			b.ReportAllocs()
			for b.Loop() {
				if err := c.SampleRows(rngs, logits, acts, logp); err != nil {
					b.Fatal(err)
				}
			}
			reportRows(b, benchRows)
		})
	}
}

// BenchmarkCategoricalSampleUniform samples a batch of 1024 rows of 2 logits with given uniform
// numbers and log-probabilities, as a batcher's CartPole worker does each step: SampleUniform
// ("path=head": on an AVX-512 CPU, kernels.Categorical2Sample) and the Go loop alone
// ("path=go").
//
//	go test ./models/head -run '^$' -bench SampleUniform -cpu 1
func BenchmarkCategoricalSampleUniform(b *testing.B) {
	logits := normals(benchRows*2, 2)
	u := make([]float64, benchRows)
	for i, r := range rowStreams(benchRows) {
		u[i] = r.Float64()
	}
	acts, logp := make([]int32, benchRows), make([]float32, benchRows)
	for _, path := range []string{"head", "go"} {
		b.Run("path="+path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if path == "head" {
					err = Categorical{N: 2}.SampleUniform(u, logits, acts, logp)
				} else {
					err = binaryFrom(0, nil, false, u, logits, acts, logp)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			reportRows(b, benchRows)
		})
	}
}

// BenchmarkGaussianSampleRows samples a batch of 1024 rows of 6 dimensions (HalfCheetah),
// each from its own stream, clipped, with log-probabilities: log_std shared ([D], SB3's and
// CleanRL's) and per row ([batch, D]).
func BenchmarkGaussianSampleRows(b *testing.B) {
	const d = 6
	low, high := make([]float32, d), make([]float32, d)
	for j := range low {
		low[j], high[j] = -1, 1
	}
	g := Gaussian{Low: low, High: high}
	for _, tc := range []struct {
		name   string
		logStd []float32
	}{{"D=6/shared", normals(d, 0.3)}, {"D=6/per_row", normals(benchRows*d, 0.3)}} {
		b.Run(tc.name, func(b *testing.B) {
			mean, rngs := normals(benchRows*d, 1), rowStreams(benchRows)
			raw, clipped, logp := make([]float32, benchRows*d), make([]float32, benchRows*d), make([]float32, benchRows)
			b.ReportAllocs()
			for b.Loop() {
				if err := g.SampleRows(rngs, mean, tc.logStd, raw, clipped, logp); err != nil {
					b.Fatal(err)
				}
			}
			reportRows(b, benchRows)
		})
	}
}

// BenchmarkCategoricalForward is a PPO loss's categorical head over one minibatch of the demo
// (128 rows of 2 logits): CategoricalForward row by row ("rows=each"), and
// CategoricalForwardRows ("rows=all").
//
//	go test ./models/head -run '^$' -bench CategoricalForward -cpu 1
func BenchmarkCategoricalForward(b *testing.B) {
	const rows, n = 128, 2
	logits := normals(rows*n, 1)
	acts := make([]int32, rows)
	for i := range acts {
		acts[i] = int32(i % n)
	}
	ls, p := make([]float64, rows*n), make([]float64, rows*n)
	logp, ent := make([]float64, rows), make([]float64, rows)
	b.Run("rows=each", func(b *testing.B) {
		for b.Loop() {
			for i, a := range acts {
				logp[i], ent[i] = CategoricalForward(logits[i*n:(i+1)*n], int(a), ls[i*n:(i+1)*n], p[i*n:(i+1)*n])
			}
		}
		reportRows(b, rows)
	})
	b.Run("rows=all", func(b *testing.B) {
		for b.Loop() {
			CategoricalForwardRows(n, logits, acts, ls, p, logp, ent)
		}
		reportRows(b, rows)
	})
}
