package mlp

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
)

// ref is the network's forward pass in float64, written out from the definition.
func ref(n Net, p []float64, x []float64, rows int) []float64 {
	for l, out := range n.Sizes {
		k := n.inOf(l)
		wo, bo := n.Layer(l)
		y := make([]float64, rows*out)
		for r := range rows {
			for j := range out {
				s := p[bo+j]
				for i := range k {
					s += x[r*k+i] * p[wo+i*out+j]
				}
				if l < len(n.Sizes)-1 {
					switch n.Act {
					case kernels.ReLU:
						s = math.Max(s, 0)
					case kernels.Tanh:
						s = math.Tanh(s)
					}
				}
				y[r*out+j] = s
			}
		}
		x = y
	}
	return x
}

// TestGradients checks Forward against the float64 definition and Backward's parameter and
// input gradients of loss = Σ c·y (c fixed random weights) against central differences of it.
func TestGradients(t *testing.T) {
	for _, act := range []kernels.Act{kernels.ReLU, kernels.Tanh} {
		rng := rand.New(rand.NewPCG(1, uint64(act)))
		n, err := New(5, []int{7, 6}, 3, act)
		if err != nil {
			t.Fatal(err)
		}
		const rows = 4
		p := make([]float32, n.NumParams())
		n.Init(p, rng)
		w := n.NewWork(rows)
		for i := range w.In() {
			w.In()[i] = float32(rng.NormFloat64())
		}
		c := make([]float64, rows*n.Out())
		for i := range c {
			c[i] = rng.NormFloat64()
			w.DOut()[i] = float32(c[i])
		}
		n.Forward(p, w)
		p64, x64 := to64(p), to64(w.In())
		want := ref(n, p64, x64, rows)
		for i, v := range w.Out() {
			if math.Abs(float64(v)-want[i]) > 1e-5*(1+math.Abs(want[i])) {
				t.Fatalf("act %d: output %d = %v, want %v", act, i, v, want[i])
			}
		}
		g, dx := make([]float32, len(p)), make([]float32, len(x64))
		n.Backward(p, w, g, dx)
		loss := func(p, x []float64) float64 {
			var s float64
			for i, y := range ref(n, p, x, rows) {
				s += c[i] * y
			}
			return s
		}
		const h = 1e-6
		check := func(what string, v []float64, got []float32, f func() float64) {
			for i := range v {
				old := v[i]
				v[i] = old + h
				up := f()
				v[i] = old - h
				down := f()
				v[i] = old
				fd := (up - down) / (2 * h)
				if math.Abs(float64(got[i])-fd) > 1e-4*(1+math.Abs(fd)) {
					t.Errorf("act %d: %s gradient %d = %v, central difference %v", act, what, i, got[i], fd)
				}
			}
		}
		dxt := make([]float32, 3*rows) // inputs 1..3, transposed
		n.InputGradT(p, w, 1, 4, dxt)
		for j := 1; j < 4; j++ {
			for r := range rows {
				if got, want := dxt[(j-1)*rows+r], dx[r*n.In+j]; math.Abs(float64(got-want)) > 1e-6*(1+math.Abs(float64(want))) {
					t.Errorf("act %d: InputGradT row %d input %d = %v, Backward's %v", act, r, j, got, want)
				}
			}
		}
		check("parameter", p64, g, func() float64 { return loss(p64, x64) })
		check("input", x64, dx, func() float64 { return loss(p64, x64) })
	}
}

func TestPolyak(t *testing.T) {
	target, p := []float32{1, 2, 4}, []float32{3, 2, 0}
	Polyak(target, p, 0.25)
	if want := []float32{1.5, 2, 3}; !equal(target, want) {
		t.Errorf("τ = 0.25: %v, want %v", target, want)
	}
	Polyak(target, p, 1)
	if !equal(target, p) {
		t.Errorf("τ = 1: %v, want %v", target, p)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		in, out int
		hidden  []int
	}{{0, 1, nil}, {3, 0, nil}, {3, 1, []int{4, 0}}, {3, 1, []int{1 << 20, 1 << 20}}, {1 << 40, 1 << 40, nil}} {
		if _, err := New(c.in, c.hidden, c.out, kernels.ReLU); err == nil {
			t.Errorf("New(%d, %v, %d) accepted", c.in, c.hidden, c.out)
		}
	}
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func equal(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

// TestPrefix: a Forward of 2n rows then a Backward of its first n gives the bits of a Forward
// and Backward of those n rows alone.
func TestPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	n, err := New(4, []int{9, 5}, 2, kernels.ReLU)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, n.NumParams())
	n.Init(p, rng)
	both, one := n.NewWork(6), n.NewWork(3)
	for i := range both.In() {
		both.In()[i] = float32(rng.NormFloat64())
	}
	copy(one.In(), both.In())
	pre := both.Prefix(3)
	for i := range one.DOut() {
		one.DOut()[i] = float32(rng.NormFloat64())
	}
	copy(pre.DOut(), one.DOut())
	n.Forward(p, both)
	n.Forward(p, one)
	g1, g2 := make([]float32, len(p)), make([]float32, len(p))
	dx1, dx2 := make([]float32, 12), make([]float32, 12)
	n.Backward(p, pre, g1, dx1)
	n.Backward(p, one, g2, dx2)
	if !equal(g1, g2) || !equal(dx1, dx2) || !equal(pre.Out(), one.Out()) || !equal(both.Out()[:6], one.Out()) {
		t.Error("the prefix's gradients differ from those of its rows alone")
	}
}

func TestCheckRows(t *testing.T) {
	n, err := New(17, []int{256, 256}, 1, kernels.ReLU)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.CheckRows(256); err != nil {
		t.Errorf("256 rows: %v", err)
	}
	for _, rows := range []int{0, -1, 1 << 40} {
		if err := n.CheckRows(rows); err == nil {
			t.Errorf("%d rows accepted", rows)
		}
	}
}
