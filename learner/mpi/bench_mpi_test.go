//go:build mpi && cgo

package mpi

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The benchmarks are collective: every rank must run the same iterations, so run them with a
// fixed count, e.g. `-test.bench . -test.benchtime 2000x` (scripts/mpi_test.sh bench does).
// Each reports the latency of one all-reduce on this rank in µs/allreduce.

var benchSizes = []int{10_000, 1_000_000}

func sizeName(n int) string {
	if n >= 1_000_000 {
		return fmt.Sprintf("%dM", n/1_000_000)
	}
	return fmt.Sprintf("%dk", n/1000)
}

func reportLatency(b *testing.B, d time.Duration, calls int) {
	b.ReportMetric(float64(d.Nanoseconds())/1e3/float64(calls), "µs/allreduce")
}

// BenchmarkAllReduceWeighted: back-to-back weighted all-reduces (float64 on the wire, polled).
func BenchmarkAllReduceWeighted(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			buf := rankBuf(world.Rank(), n, 0)
			if err := world.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
			calls := 0
			for b.Loop() {
				if err := world.AllReduceWeighted(ctx, buf, 1); err != nil {
					b.Fatal(err)
				}
				calls++
			}
			reportLatency(b, b.Elapsed(), calls)
		})
	}
}

// BenchmarkAllReduceFloat64: the same polled all-reduce of float64 without the weighting (a
// sum in place), to separate MPI's part of BenchmarkAllReduceWeighted from the packing.
func BenchmarkAllReduceFloat64(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			buf := make([]float64, n)
			if err := world.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
			calls := 0
			for b.Loop() {
				if err := world.AllReduceFloat64(ctx, Sum, buf); err != nil {
					b.Fatal(err)
				}
				calls++
			}
			reportLatency(b, b.Elapsed(), calls)
		})
	}
}

// BenchmarkAllReduceBlockingFloat32 is the baseline: plain blocking MPI_Allreduce of float32.
func BenchmarkAllReduceBlockingFloat32(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			buf := rankBuf(world.Rank(), n, 0)
			if err := world.Barrier(context.Background()); err != nil {
				b.Fatal(err)
			}
			calls := 0
			for b.Loop() {
				if err := world.allReduceBlockingFloat32(buf); err != nil {
					b.Fatal(err)
				}
				clear(buf) // keep the values finite
				calls++
			}
			reportLatency(b, b.Elapsed(), calls)
		})
	}
}

// BenchmarkAllReduceWeightedLate: the last rank arrives 5 ms after the others, which by then
// have stopped spinning and sleep between polls; it times only its own call: what the
// others' sleeping adds to an all-reduce.
func BenchmarkAllReduceWeightedLate(b *testing.B) {
	ctx := context.Background()
	last := world.Rank() == world.Size()-1
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			buf := rankBuf(world.Rank(), n, 0)
			if err := world.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
			var own time.Duration
			calls := 0
			for b.Loop() {
				if last {
					time.Sleep(5 * time.Millisecond)
				}
				t := time.Now()
				if err := world.AllReduceWeighted(ctx, buf, 1); err != nil {
					b.Fatal(err)
				}
				own += time.Since(t)
				calls++
			}
			reportLatency(b, own, calls)
		})
	}
}
