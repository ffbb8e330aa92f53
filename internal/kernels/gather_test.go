package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestGather: rows of 1 to 17 values, orders with repeats, empty ones, and a source of 1 row,
// give row perm[i] of the source in row i, as the plain loop; an entry out of range (negative,
// or past the last row) panics naming it, after the rows before it.
func TestGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []int{1, 2, 3, 4, 7, 17} {
		for _, c := range []struct{ rows, n int }{{1, 5}, {1000, 0}, {1000, 1}, {1000, 999}, {70000, 4096}} {
			src := randSlice(rng, c.rows*d)
			perm := make([]int, c.n)
			for i := range perm {
				perm[i] = rng.IntN(c.rows)
			}
			got, want := make([]float32, c.n*d+3), make([]float32, c.n*d+3)
			Gather(got, src, perm, d)
			for i, p := range perm {
				copy(want[i*d:(i+1)*d], src[p*d:(p+1)*d])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("d %d, %d rows, %d gathered: not the source's rows", d, c.rows, c.n)
			}
		}
	}
	for _, bad := range []int{-1, 10, 1 << 40} {
		src, dst := randSlice(rng, 40), make([]float32, 40)
		perm := []int{3, 1, bad, 2}
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			Gather(dst, src, perm, 4)
			return ""
		}()
		if !strings.Contains(msg, fmt.Sprintf("entry 2 names row %d of a source of 10 rows", bad)) {
			t.Errorf("row %d: %q", bad, msg)
		}
		if !slices.Equal(dst[:8], append(slices.Clone(src[12:16]), src[4:8]...)) {
			t.Errorf("row %d: the rows before it were not copied", bad)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a short destination was accepted")
			}
		}()
		Gather(make([]float32, 7), make([]float32, 40), []int{0, 1}, 4)
	}()
}

// BenchmarkGather is a PPO tower's gather in issue 32's run: 4,096 rows of 4 values (CartPole's
// observations) and of 1 at random from 65,536, with a 16 MB sweep between gathers so that the
// source is out of the cache, as after a tower's gradient; "go" is the plain loop.
func BenchmarkGather(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, n = 65536, 4096
	sweep := make([]float32, 4<<20)
	for _, d := range []int{1, 4} {
		src, dst := randSlice(rng, rows*d), make([]float32, n*d)
		perm := rng.Perm(rows)[:n]
		for _, path := range []string{"kernel", "go"} {
			b.Run(fmt.Sprintf("d=%d/path=%s", d, path), func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					for i := 0; i < len(sweep); i += 16 {
						sweep[i]++
					}
					b.StartTimer()
					if path == "go" {
						gatherLoop(dst, src, perm, d)
					} else {
						Gather(dst, src, perm, d)
					}
				}
			})
		}
	}
}
