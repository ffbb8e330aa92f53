package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// levels are the implementations this build and CPU can run (the Go loops always, the C copies
// in a native build), each tested against the float64 references.
func levels(testing.TB) []int { return testLevels() }

// withLevel runs f with the kernels of level l.
func withLevel(l int, f func()) {
	old := level
	level = l
	defer func() { level = old }()
	f()
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func actRef(x float64, act Act) float64 {
	switch act {
	case Tanh:
		return math.Tanh(x)
	case ReLU:
		return math.Max(x, 0)
	}
	return x
}

// gemmRef is Gemm in float64 loops.
func gemmRef(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int,
	c []float32, ldc int, acc bool, bias []float32, act Act) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			s := 0.0
			for p := range k {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			if acc {
				s += float64(c[i*ldc+j])
			}
			if bias != nil {
				s += float64(bias[j])
			}
			out[i*n+j] = actRef(s, act)
		}
	}
	return out
}

// TestGemm checks every transpose, activation, accumulation and bias combination on shapes
// with odd sizes, padded leading dimensions and the policy layers' own shapes, at every
// instruction-set level the CPU has.
func TestGemm(t *testing.T) {
	shapes := [][3]int{
		{1, 1, 1}, {3, 3, 3}, {1, 257, 3}, {257, 1, 3}, {3, 1, 257}, {257, 257, 1}, {17, 33, 65},
		{512, 64, 4}, {512, 64, 64}, {512, 2, 64}, {512, 1, 64}, {64, 64, 512}, {4, 64, 512},
		{64, 2, 512}, {64, 1, 512}, {512, 64, 2}, {512, 64, 1}, {33, 7, 300}, {7, 19, 0}, {5, 3, 600},
		{40, 23, 300}, {3, 100, 17}, {64, 300, 9}, {32, 256, 64}, {33, 80, 300}, {24, 64, 17},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	eachProduct(t, shapes, func(l, m, n, k int, ta, tb bool, ci int, act Act) {
		acc := ci == 0 && rng.IntN(2) == 0
		pad := rng.IntN(3)
		ar, ac := opShape(ta, m, k)
		br, bc := opShape(tb, k, n)
		lda, ldb, ldc := max(ac, 1)+pad, max(bc, 1)+pad, max(n, 1)+pad
		a := randSlice(rng, ar*lda)
		b := randSlice(rng, br*ldb)
		c := randSlice(rng, m*ldc)
		var bias []float32
		if rng.IntN(2) == 0 {
			bias = randSlice(rng, n)
		}
		want := gemmRef(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act)
		name := fmt.Sprintf("level %d %dx%dx%d ta=%v tb=%v act=%d acc=%v bias=%v pad=%d",
			l, m, n, k, ta, tb, act, acc, bias != nil, pad)
		before := append([]float32(nil), c...)
		withLevel(l, func() { Gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, acc, bias, act) })
		checkMatrix(t, name, c, before, want, m, n, ldc, k)
	})
}

// eachProduct calls f for every level, shape (m, n, k), transpose of A and B and activation
// (ci its index among None, Tanh and ReLU).
func eachProduct(t *testing.T, shapes [][3]int, f func(l, m, n, k int, ta, tb bool, ci int, act Act)) {
	for _, l := range levels(t) {
		for _, s := range shapes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for ci, act := range []Act{None, Tanh, ReLU} {
						f(l, s[0], s[1], s[2], ta, tb, ci, act)
					}
				}
			}
		}
	}
}

// TestGemmActGrad: at every level, the fused product times the activation's derivative has
// the bits of Gemm (no bias, no act) followed by ActGrad, for every transpose and activation,
// over the shapes of TestGemm (the dot, packed and transposed paths and their edges), with Y
// and C padded differently; and the padding of C is left alone.
func TestGemmActGrad(t *testing.T) {
	shapes := [][3]int{
		{1, 1, 1}, {3, 3, 3}, {1, 257, 3}, {257, 1, 3}, {3, 1, 257}, {257, 257, 1}, {17, 33, 65},
		{128, 64, 64}, {128, 64, 2}, {128, 64, 1}, {64, 64, 512}, {33, 7, 300}, {7, 19, 0}, {128, 48, 64},
		{40, 23, 300}, {64, 300, 9}, {32, 256, 64}, {33, 80, 300}, {24, 64, 17},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	eachProduct(t, shapes, func(l, m, n, k int, ta, tb bool, _ int, act Act) {
		ar, ac := opShape(ta, m, k)
		br, bc := opShape(tb, k, n)
		lda, ldb, ldc, ldy := max(ac, 1)+rng.IntN(2), max(bc, 1)+rng.IntN(2), n+rng.IntN(3), n+rng.IntN(3)
		a, b, y := randSlice(rng, ar*lda), randSlice(rng, br*ldb), randSlice(rng, m*ldy)
		for i := range y {
			y[i] = float32(math.Tanh(float64(y[i])))
		}
		want := make([]float32, m*n)
		withLevel(l, func() {
			Gemm(ta, tb, m, n, k, a, lda, b, ldb, want, max(n, 1), false, nil, None)
			yc := make([]float32, m*n)
			for i := range m {
				copy(yc[i*n:(i+1)*n], y[i*ldy:])
			}
			ActGrad(act, yc, want, want)
		})
		c := randSlice(rng, m*ldc)
		before := append([]float32(nil), c...)
		withLevel(l, func() { GemmActGrad(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, y, ldy, act) })
		for i := range m {
			for j := range ldc {
				got := c[i*ldc+j]
				if j >= n {
					if got != before[i*ldc+j] {
						t.Fatalf("level %d %dx%dx%d: padding C[%d][%d] changed", l, m, n, k, i, j)
					}
					continue
				}
				if math.Float32bits(got) != math.Float32bits(want[i*n+j]) {
					t.Fatalf("level %d %dx%dx%d ta=%v tb=%v act=%d: C[%d][%d] = %v, Gemm then ActGrad %v",
						l, m, n, k, ta, tb, act, i, j, got, want[i*n+j])
				}
			}
		}
	})
}

// TestFewRowsTransposedB: a product A·Bᵀ with at most half as many rows as columns (a layer's
// input gradient on a tower's share of a small minibatch) is made as Cᵀ = B·Aᵀ, transposing A
// instead of B; it must give, bit for bit, the product of A and an explicit transpose of B
// (what the path that transposes B computes), added to C or not, with C and Y padded, alone
// and times the activation's derivative, at every level of the C kernels (the Go loops take
// each entry of a product with B transposed as a dot product, in their own order).
func TestFewRowsTransposedB(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, l := range levels(t) {
		if l == levelGo {
			continue
		}
		for _, s := range [][3]int{{32, 256, 256}, {24, 64, 17}, {33, 80, 300}, {64, 128, 2}, {40, 100, 513}} {
			m, n, k := s[0], s[1], s[2]
			for _, acc := range []bool{false, true} {
				lda, ldb, ldc := k+rng.IntN(2), k+rng.IntN(2), n+1+rng.IntN(2)
				a, b, c0 := randSlice(rng, m*lda), randSlice(rng, n*ldb), randSlice(rng, m*ldc)
				bt := make([]float32, k*n) // Bᵀ [k, n]
				for j := range n {
					for p := range k {
						bt[p*n+j] = b[j*ldb+p]
					}
				}
				got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
				withLevel(l, func() {
					Gemm(false, true, m, n, k, a, lda, b, ldb, got, ldc, acc, nil, None)
					Gemm(false, false, m, n, k, a, lda, bt, n, want, ldc, acc, nil, None)
				})
				name := fmt.Sprintf("level %d %dx%dx%d acc=%v", l, m, n, k, acc)
				sameBits(t, name, got, want)
				if acc {
					continue
				}
				y := randSlice(rng, m*n)
				for _, act := range []Act{Tanh, ReLU} {
					withLevel(l, func() {
						GemmActGrad(false, true, m, n, k, a, lda, b, ldb, got, ldc, y, n, act)
						GemmActGrad(false, false, m, n, k, a, lda, bt, n, want, ldc, y, n, act)
					})
					sameBits(t, fmt.Sprintf("%s act'=%d", name, act), got, want)
				}
			}
		}
	}
}

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d is %v, want %v", name, i, got[i], want[i])
		}
	}
}

// checkMatrix compares C with the reference to 1e-5 relative (against the size of the terms
// summed) and checks that the padding columns were left alone.
func checkMatrix(t *testing.T, name string, c, before []float32, want []float64, m, n, ldc, k int) {
	t.Helper()
	tol := 1e-5 * math.Sqrt(float64(max(k, 1))) * 3
	for i := range m {
		for j := range ldc {
			got := float64(c[i*ldc+j])
			if j >= n {
				if c[i*ldc+j] != before[i*ldc+j] {
					t.Fatalf("%s: padding C[%d][%d] changed", name, i, j)
				}
				continue
			}
			w := want[i*n+j]
			if math.Abs(got-w) > tol*math.Max(1, math.Abs(w)) {
				t.Fatalf("%s: C[%d][%d] = %g, want %g", name, i, j, got, w)
			}
		}
	}
}

func TestTanhAccuracy(t *testing.T) {
	x := make([]float32, 0, 20001)
	for i := -10000; i <= 10000; i++ {
		x = append(x, float32(i)*1e-3)
	}
	x = append(x, 1e-8, -1e-8, 30, -30, float32(math.Inf(1)), float32(math.Inf(-1)))
	one := []float32{1}
	for _, l := range levels(t) {
		y := make([]float32, len(x))
		withLevel(l, func() {
			for i := range x { // one column at a time: the scalar path
				Gemm(false, false, 1, 1, 1, x[i:i+1], 1, one, 1, y[i:i+1], 1, false, nil, Tanh)
			}
		})
		yv := make([]float32, len(x))
		withLevel(l, func() { Gemm(false, false, len(x), 1, 1, x, 1, one, 1, yv, 1, false, nil, Tanh) })
		row := make([]float32, len(x))
		withLevel(l, func() { Gemm(false, false, 1, len(x), 1, one, 1, x, len(x), row, len(x), false, nil, Tanh) })
		for i, xi := range x {
			w := math.Tanh(float64(xi))
			for _, got := range []float32{y[i], yv[i], row[i]} {
				if e := math.Abs(float64(got) - w); e > 4e-7*math.Abs(w) {
					t.Fatalf("level %d: tanh(%g) = %g, want %g", l, xi, got, w)
				}
			}
		}
	}
	nan := []float32{float32(math.NaN())}
	out := []float32{0}
	Gemm(false, false, 1, 1, 1, nan, 1, one, 1, out, 1, false, nil, Tanh)
	if !math.IsNaN(float64(out[0])) {
		t.Errorf("tanh(NaN) = %g", out[0])
	}
}

func TestActGradColSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, l := range levels(t) {
		for _, n := range []int{0, 1, 3, 17, 257, 512 * 64} {
			y, dy := randSlice(rng, n), randSlice(rng, n)
			for _, act := range []Act{None, Tanh, ReLU} {
				dz := make([]float32, n)
				withLevel(l, func() { ActGrad(act, y, dy, dz) })
				for i := range n {
					w := float64(dy[i])
					switch act {
					case Tanh:
						w *= 1 - float64(y[i])*float64(y[i])
					case ReLU:
						if y[i] <= 0 {
							w = 0
						}
					}
					if math.Abs(float64(dz[i])-w) > 1e-6*math.Max(1, math.Abs(w)) {
						t.Fatalf("level %d act %d n %d: dz[%d] = %g, want %g", l, act, n, i, dz[i], w)
					}
				}
			}
		}
		for _, s := range [][2]int{{1, 1}, {3, 3}, {257, 1}, {1, 257}, {512, 64}, {513, 17}, {0, 5}} {
			m, n := s[0], s[1]
			a := randSlice(rng, m*n)
			for _, acc := range []bool{false, true} {
				dst := randSlice(rng, n)
				want := make([]float64, n)
				for j := range n {
					if acc {
						want[j] = float64(dst[j])
					}
					for i := range m {
						want[j] += float64(a[i*n+j])
					}
				}
				withLevel(l, func() { ColSum(m, n, a, dst, acc) })
				for j := range n {
					if math.Abs(float64(dst[j])-want[j]) > 1e-5*math.Sqrt(float64(m+1))*math.Max(1, math.Abs(want[j])) {
						t.Fatalf("level %d %dx%d acc=%v: sum[%d] = %g, want %g", l, m, n, acc, j, dst[j], want[j])
					}
				}
			}
		}
	}
}

func TestShapePanics(t *testing.T) {
	for name, f := range map[string]func(){
		"short A": func() {
			Gemm(false, false, 2, 2, 2, make([]float32, 3), 2, make([]float32, 4), 2, make([]float32, 4), 2, false, nil, None)
		},
		"short C": func() {
			Gemm(false, false, 2, 2, 2, make([]float32, 4), 2, make([]float32, 4), 2, make([]float32, 3), 2, false, nil, None)
		},
		"bad ld": func() {
			Gemm(false, false, 2, 2, 2, make([]float32, 4), 1, make([]float32, 4), 2, make([]float32, 4), 2, false, nil, None)
		},
		"short bias": func() {
			Linear(2, 2, 2, make([]float32, 4), make([]float32, 4), make([]float32, 1), make([]float32, 4), None)
		},
		"act grad": func() { ActGrad(Tanh, make([]float32, 2), make([]float32, 3), make([]float32, 2)) },
		"adam": func() {
			Adam(make([]float32, 3), make([]float32, 2), make([]float32, 3), make([]float32, 3), 0, 0, 0, 0, 0, 1, 1)
		},
		"square sums block": func() { SquareSums(make([]float32, 8), 6, make([]float64, 2)) },
		"short Y": func() {
			GemmActGrad(false, false, 2, 2, 2, make([]float32, 4), 2, make([]float32, 4), 2, make([]float32, 4), 2, make([]float32, 3), 2, Tanh)
		},
		"square sums short": func() { SquareSums(make([]float32, 9), 4, make([]float64, 2)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// BenchmarkLinear is the hidden layer of the CartPole policy: 512×64 by 64×64 with tanh.
func BenchmarkLinear(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range [][3]int{{512, 64, 64}, {512, 64, 4}, {512, 2, 64}} {
		m, n, k := s[0], s[1], s[2]
		x, w, bias, y := randSlice(rng, m*k), randSlice(rng, k*n), randSlice(rng, n), make([]float32, m*n)
		b.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(b *testing.B) {
			for b.Loop() {
				Linear(m, n, k, x, w, bias, y, Tanh)
			}
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmWidths is C = A·B with A 256×256 and B 256×n for widths that are and are not
// a multiple of the vector width (8 floats with AVX2, 16 with AVX-512): CleanRL's DQN's 84, RL
// Zoo's TD3 300, a critic's 23 inputs. The columns past the last whole vector once ran through
// the scalar reference product, 10–30× slower than their neighbours (docs/offpolicy.md).
func BenchmarkGemmWidths(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{16, 20, 23, 32, 84, 100, 256, 300} {
		m, k := 256, 256
		x, w, y := randSlice(rng, m*k), randSlice(rng, k*n), make([]float32, m*n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				Gemm(false, false, m, n, k, x, k, w, n, y, n, false, nil, None)
			}
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkGemmBackward is the weight gradient (Aᵀ·B) and input gradient (A·Bᵀ) of the hidden
// layer.
func BenchmarkGemmBackward(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	x, dz, w := randSlice(rng, 512*64), randSlice(rng, 512*64), randSlice(rng, 64*64)
	dw, dx := make([]float32, 64*64), make([]float32, 512*64)
	b.Run("dW", func(b *testing.B) {
		for b.Loop() {
			Gemm(true, false, 64, 64, 512, x, 64, dz, 64, dw, 64, false, nil, None)
		}
		b.ReportMetric(2*512*64*64*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("dX", func(b *testing.B) {
		for b.Loop() {
			Gemm(false, true, 512, 64, 64, dz, 64, w, 64, dx, 64, false, nil, None)
		}
		b.ReportMetric(2*512*64*64*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// adamLoop is Adam's update written out in float64, each operation rounded to float32 as it is
// done: for +, −, ×, ÷ and √ of float32 operands that is the correctly rounded float32 result
// (float64 carries more than twice float32's 24 bits), what every implementation must give.
func adamLoop(p, g, m, v []float32, b1, b2, c1, c2, step, sbc2, eps float32) {
	r := func(x float64) float64 { return float64(float32(x)) }
	for i := range p {
		gi := float64(g[i])
		mi := r(r(float64(b1)*float64(m[i])) + r(float64(c1)*gi))
		vi := r(r(float64(b2)*float64(v[i])) + r(r(float64(c2)*gi)*gi))
		m[i], v[i] = float32(mi), float32(vi)
		den := r(r(r(math.Sqrt(vi))/float64(sbc2)) + float64(eps))
		p[i] = float32(float64(p[i]) - r(r(float64(step)*mi)/den))
	}
}

// spread makes g span magnitudes: of every `every` values, the first becomes 0, the second is
// scaled by 1e-30 and the third by big.
func spread(g []float32, every int, big float32) []float32 {
	for i := range g {
		switch i % every {
		case 0:
			g[i] = 0
		case 1:
			g[i] *= 1e-30
		case 2:
			g[i] *= big
		}
	}
	return g
}

// TestAdamBitIdentical: every copy of the Adam kernel gives the plain loop's bits, over
// lengths that exercise the vector body and the tail and over values from 0 to 1e10.
func TestAdamBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, l := range levels(t) {
		for _, n := range []int{0, 1, 15, 16, 17, 33, 9155} {
			p, g := randSlice(rng, n), spread(randSlice(rng, n), 7, 1e10)
			m, v := make([]float32, n), make([]float32, n)
			wp, wm, wv := append([]float32(nil), p...), make([]float32, n), make([]float32, n)
			const b1, b2, eps = 0.9, 0.999, 1e-5
			for step := 1; step <= 3; step++ {
				bc1 := 1 - math.Pow(b1, float64(step))
				sbc2 := float32(math.Sqrt(1 - math.Pow(b2, float64(step))))
				lr := float32(2.5e-4 / bc1)
				withLevel(l, func() { Adam(p, g, m, v, b1, b2, 1-b1, 1-b2, lr, sbc2, eps) })
				adamLoop(wp, g, wm, wv, b1, b2, 1-b1, 1-b2, lr, sbc2, eps)
				for i := range n {
					if math.Float32bits(p[i]) != math.Float32bits(wp[i]) || m[i] != wm[i] || v[i] != wv[i] {
						t.Fatalf("level %d n %d step %d [%d]: p, m, v = %g, %g, %g; the loop gives %g, %g, %g",
							l, n, step, i, p[i], m[i], v[i], wp[i], wm[i], wv[i])
					}
				}
			}
		}
	}
}

// TestSquareSums: every implementation gives each block's square sum with the bits of the
// definition (value j of the block to partial sum j mod 4, then (s0+s1)+(s2+s3), in float64),
// over lengths that leave whole groups of four blocks, single blocks, short last blocks and
// tails within a group of four, and values from 0 to 1e±30.
func TestSquareSums(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, l := range levels(t) {
		for _, block := range []int{4, 8, 512} {
			for _, n := range []int{0, 1, 3, 5, block - 1, block, block + 3, 4 * block, 5*block + 2, 9218} {
				g := spread(randSlice(rng, n), 5, 1e30)
				blocks := (n + block - 1) / block
				got := make([]float64, blocks+1)
				got[blocks] = -1
				withLevel(l, func() { SquareSums(g, block, got) })
				for b := range blocks {
					var s [4]float64
					for j := b * block; j < min((b+1)*block, n); j++ {
						s[(j-b*block)%4] += float64(g[j]) * float64(g[j])
					}
					if want := (s[0] + s[1]) + (s[2] + s[3]); math.Float64bits(got[b]) != math.Float64bits(want) {
						t.Fatalf("level %d block %d n %d: sum %d = %v, want %v", l, block, n, b, got[b], want)
					}
				}
				if got[blocks] != -1 {
					t.Fatalf("level %d block %d n %d: wrote past the last block", l, block, n)
				}
			}
		}
	}
}

// TestLevel: the build constraint picks the implementation, and the tests run the Go loops in
// every build.
func TestLevel(t *testing.T) {
	got := Level()
	switch {
	case nativeBuild && got != "sse2" && got != "avx2" && got != "avx512":
		t.Errorf("Level() = %q in a native build, want the C copy for this CPU", got)
	case !nativeBuild && got != "go":
		t.Errorf("Level() = %q in a purego build, want \"go\"", got)
	}
	var names []string
	for _, l := range levels(t) {
		names = append(names, levelName(l))
	}
	if names[0] != "go" || (nativeBuild && len(names) < 3) || (!nativeBuild && len(names) != 1) {
		t.Errorf("the tests run %v", names)
	}
}

// TestNoAllocs: no implementation allocates Go memory, on any path of the product.
func TestNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	a, b, c, bias := randSlice(rng, 64*64), randSlice(rng, 64*64), randSlice(rng, 64*64), randSlice(rng, 64)
	m, v := make([]float32, 64*64), make([]float32, 64*64)
	sums := make([]float64, 8)
	for _, l := range levels(t) {
		withLevel(l, func() {
			n := testing.AllocsPerRun(5, func() {
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						Gemm(ta, tb, 64, 64, 64, a, 64, b, 64, c, 64, true, bias, Tanh)
						Gemm(ta, tb, 64, 2, 64, a, 64, b, 64, c, 64, false, nil, None)
						GemmActGrad(ta, tb, 64, 64, 64, a, 64, b, 64, c, 64, m, 64, Tanh)
						GemmActGrad(ta, tb, 64, 2, 64, a, 64, b, 64, c, 64, m, 64, ReLU)
					}
				}
				ActGrad(ReLU, a, b, c)
				ColSum(64, 64, a, c, true)
				Adam(c, a, m, v, 0.9, 0.999, 0.1, 0.001, 1e-3, 1, 1e-8)
				SquareSums(a, 512, sums)
			})
			if n != 0 {
				t.Errorf("%s: %v allocations per run", levelName(l), n)
			}
		})
	}
}

// TestDotRowsBits: a narrow product (n < the vector width, the dot path) gives each row the
// same bits whether the row is summed with fifteen others (dot16's reduction of 16 rows side
// by side) or alone (a product whose last row is left over), and the column sums the same
// bits whichever of their paths sums them; for every level.
func TestDotRowsBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 21))
	for _, l := range levels(t) {
		for _, k := range []int{16, 32, 48, 64, 256} {
			for _, n := range []int{1, 2, 3} {
				a, b := randSlice(rng, 48*k), randSlice(rng, n*k)
				bias := randSlice(rng, n)
				all := make([]float32, 48*n)
				withLevel(l, func() { Gemm(false, true, 48, n, k, a, k, b, k, all, n, false, bias, Tanh) })
				for r := 16; r < 48; r++ {
					one := make([]float32, 17*n)
					withLevel(l, func() { Gemm(false, true, 17, n, k, a[(r-16)*k:], k, b, k, one, n, false, bias, Tanh) })
					for j := range n {
						if math.Float32bits(one[16*n+j]) != math.Float32bits(all[r*n+j]) {
							t.Fatalf("level %d k %d n %d: row %d column %d alone %v, among 48 rows %v", l, k, n, r, j, one[16*n+j], all[r*n+j])
						}
					}
				}
			}
		}
	}
}

// TestAxpyBits: at every level, Axpy gives Go's loop's bits (each product rounded, then the
// sum), over lengths around the vector widths.
func TestAxpyBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 23))
	for _, l := range levels(t) {
		for _, n := range []int{1, 7, 15, 16, 17, 33, 1000} {
			x, y := randSlice(rng, n), randSlice(rng, n+1)
			w := float32(rng.NormFloat64())
			want := append([]float32(nil), y...)
			for i := range x {
				p := w * x[i]
				want[i] = want[i] + p
			}
			withLevel(l, func() { Axpy(w, x, y) })
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
					t.Fatalf("level %d n %d: y[%d] = %v, want %v", l, n, i, y[i], want[i])
				}
			}
		}
	}
}
