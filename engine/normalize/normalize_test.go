package normalize

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestObsMomentsMatchTwoPass feeds batches of several sizes and checks the running mean and
// variance against a two-pass float64 computation over every observation, with the
// pseudo-count's prior (InitCount observations at mean 0, variance 1) worked in by hand.
func TestObsMomentsMatchTwoPass(t *testing.T) {
	const d = 3
	rng := rand.New(rand.NewPCG(1, 2))
	o := NewObs(d, 0)
	var all []float32
	for _, n := range []int{1, 7, 256, 3, 1000, 64} {
		rows := make([]float32, n*d)
		for r := range n {
			rows[r*d] = float32(50 + 3*rng.NormFloat64())         // far from 0
			rows[r*d+1] = float32(-0.02 + 1e-3*rng.NormFloat64()) // tiny spread
			rows[r*d+2] = float32(rng.Float64() * 8)
		}
		if err := o.Add(rows[:n*d/2/d*d]); err != nil { // two Adds before one Commit
			t.Fatal(err)
		}
		if err := o.Add(rows[n*d/2/d*d:]); err != nil {
			t.Fatal(err)
		}
		o.Commit()
		all = append(all, rows...)

		// Two passes in float64: the mean, then the squared deviations, with the prior.
		cnt := float64(len(all)/d) + InitCount
		for i := range d {
			sum := 0.0
			for r := i; r < len(all); r += d {
				sum += float64(all[r])
			}
			mean := sum / cnt                 // the prior adds InitCount·0
			sq := InitCount * (1 + mean*mean) // the prior's variance 1 and its distance to the mean
			for r := i; r < len(all); r += d {
				dev := float64(all[r]) - mean
				sq += dev * dev
			}
			vr := sq / cnt
			if !close(o.Mean[i], mean, 1e-12) || !close(o.Var[i], vr, 1e-9) {
				t.Fatalf("after %d observations, component %d: mean %.15g var %.15g, two-pass %.15g %.15g",
					len(all)/d, i, o.Mean[i], o.Var[i], mean, vr)
			}
		}
		if !close(o.Count, cnt, 1e-15) {
			t.Fatalf("count %v, want %v", o.Count, cnt)
		}
	}
}

func close(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-300)
}

// TestObsPendingSums checks the sums two processes add up: their statistics after Commit are
// those of one process that saw both batches.
func TestObsPendingSums(t *testing.T) {
	const d = 2
	rng := rand.New(rand.NewPCG(3, 4))
	a, b, one := NewObs(d, 0), NewObs(d, 0), NewObs(d, 0)
	for range 5 {
		ra, rb := make([]float32, 10*d), make([]float32, 30*d)
		for i := range ra {
			ra[i] = float32(5 + rng.NormFloat64())
		}
		for i := range rb {
			rb[i] = float32(-2 + 4*rng.NormFloat64())
		}
		_ = a.Add(ra)
		_ = b.Add(rb)
		_ = one.Add(ra)
		_ = one.Add(rb)
		pa, pb := a.Pending(), b.Pending()
		for i := range pa { // an all-reduce of sums
			s := pa[i] + pb[i]
			pa[i], pb[i] = s, s
		}
		a.Commit()
		b.Commit()
		one.Commit()
	}
	for i := range d {
		if a.Mean[i] != b.Mean[i] || a.Var[i] != b.Var[i] {
			t.Fatalf("the two processes disagree: %v %v / %v %v", a.Mean, a.Var, b.Mean, b.Var)
		}
		if !close(a.Mean[i], one.Mean[i], 1e-12) || !close(a.Var[i], one.Var[i], 1e-12) {
			t.Fatalf("summed %v %v, one process %v %v", a.Mean, a.Var, one.Mean, one.Var)
		}
	}
}

func TestFrozenApply(t *testing.T) {
	o := NewObs(2, 0)
	_ = o.Add([]float32{1, 100, 3, 300, 5, 500})
	o.Commit()
	var f Frozen
	o.Freeze(&f)
	src := []float32{3, 300, 1e6, -1e6, 1, 100}
	dst := make([]float32, len(src))
	if err := f.Apply(dst, src); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < len(src); r += 2 {
		for i := range 2 {
			want := (float64(src[r+i]) - o.Mean[i]) / math.Sqrt(o.Var[i]+Epsilon)
			want = math.Max(-10, math.Min(10, want))
			if math.Abs(float64(dst[r+i])-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Fatalf("row %d value %d: %v, want %v", r/2, i, dst[r+i], want)
			}
		}
	}
	if dst[2] != 10 || dst[3] != -10 {
		t.Fatalf("clipping: %v", dst[2:4])
	}
	if err := f.Apply(dst[:3], src[:3]); err == nil {
		t.Fatal("a partial observation was normalised")
	}
	var g Frozen
	o.Freeze(&g)
	if !f.Equal(&g) {
		t.Fatal("two freezes of the same statistics differ")
	}
}

// TestRewardHandWorked checks the scaled rewards of one env (γ = 0.5; rewards 1, 2 ending an
// episode, then −1, 3) against Gymnasium's NormalizeReward worked step by step in float64:
// G ← γ·G + r; RunningMeanStd.update([G]) (batch mean G, variance 0, count 1); r/√(var+1e-8);
// G ← 0 after the episode's last step. The first is 70.7 before SB3's clip to 10.
func TestRewardHandWorked(t *testing.T) {
	r := NewReward(1, 0.5, 1000) // a clip out of the way
	rew := []float32{1, 2, -1, 3}
	term := []float32{0, 1, 0, 0}
	trunc := make([]float32, 4)
	dst := make([]float32, 4)
	if err := r.Scale(dst, rew, term, trunc, 4, 4, nil); err != nil {
		t.Fatal(err)
	}
	want := []float64{70.71421321062337, 2.6662519637921394, -0.6974878730263616, 2.0889255369892923}
	for i, w := range want {
		if !close(float64(dst[i]), w, 1e-6) {
			t.Fatalf("scaled reward %d: %v, want %v", i, dst[i], w)
		}
	}
	if !close(r.Mean[0], 1.2499687507812305, 1e-12) || !close(r.Var[0], 2.062512498710994, 1e-12) || !close(r.Count, 4.0001, 1e-15) {
		t.Fatalf("statistics: count %v mean %v var %v", r.Count, r.Mean[0], r.Var[0])
	}
	if r.Returns[0] != 0.5*(-1)+3 {
		t.Fatalf("return carried: %v", r.Returns[0])
	}
	// The same with SB3's clip of 10.
	r = NewReward(1, 0.5, 0)
	_ = r.Scale(dst, rew, term, trunc, 4, 4, nil)
	if dst[0] != 10 {
		t.Fatalf("clipped first reward %v, want 10", dst[0])
	}
}

// gymRMS is Gymnasium's RunningMeanStd, transliterated.
type gymRMS struct{ mean, vr, count float64 }

func (g *gymRMS) update(xs []float64) {
	bm := 0.0
	for _, x := range xs {
		bm += x
	}
	bm /= float64(len(xs))
	bv := 0.0
	for _, x := range xs {
		bv += (x - bm) * (x - bm)
	}
	bv /= float64(len(xs))
	bc := float64(len(xs))
	delta := bm - g.mean
	tot := g.count + bc
	m2 := g.vr*g.count + bv*bc + delta*delta*g.count*bc/tot
	g.mean += delta * bc / tot
	g.vr = m2 / tot
	g.count = tot
}

// TestRewardMatchesVecNormalize runs 4 envs over 3 rollouts with episode ends (terminated and
// truncated) against the vectorised formulas: one update per step with the envs' returns.
func TestRewardMatchesVecNormalize(t *testing.T) {
	const n, T, gamma = 4, 50, 0.99
	rng := rand.New(rand.NewPCG(7, 8))
	r := NewReward(n, gamma, 0)
	ref := gymRMS{0, 1, InitCount}
	G := make([]float64, n)
	for range 3 {
		rew, term, trunc := make([]float32, T*n), make([]float32, T*n), make([]float32, T*n)
		for i := range rew {
			rew[i] = float32(rng.NormFloat64()*3 - 1)
			switch rng.IntN(30) {
			case 0:
				term[i] = 1
			case 1:
				trunc[i] = 1
			}
		}
		dst := make([]float32, T*n)
		if err := r.Scale(dst, rew, term, trunc, T, T, nil); err != nil {
			t.Fatal(err)
		}
		for s := range T {
			for i := range n {
				G[i] = G[i]*gamma + float64(rew[s*n+i])
			}
			ref.update(G)
			for i := range n {
				row := s*n + i
				want := math.Max(-10, math.Min(10, float64(rew[row])/math.Sqrt(ref.vr+Epsilon)))
				if !close(float64(dst[row]), want, 1e-6) {
					t.Fatalf("step %d env %d: %v, want %v", s, i, dst[row], want)
				}
				if term[row] != 0 || trunc[row] != 0 {
					G[i] = 0
				}
			}
		}
	}
	if !close(r.Mean[0], ref.mean, 1e-10) || !close(r.Var[0], ref.vr, 1e-10) {
		t.Fatalf("statistics %v %v, reference %v %v", r.Mean[0], r.Var[0], ref.mean, ref.vr)
	}
}

// TestRewardReduced splits 4 envs over two processes whose per-step sums are added (DD-PPO's
// ranks), one of them with a shorter rollout: both end with the same statistics.
func TestRewardReduced(t *testing.T) {
	const T = 20
	rng := rand.New(rand.NewPCG(9, 10))
	a, b := NewReward(2, 0.9, 0), NewReward(2, 0.9, 0)
	rew := make([]float32, T*2)
	for i := range rew {
		rew[i] = float32(rng.NormFloat64())
	}
	zeros := make([]float32, T*2)
	// An all-reduce of two: a hands its sums to b, which adds both and hands them back.
	give, back := make(chan []float64), make(chan struct{})
	errA := make(chan error)
	go func() {
		errA <- a.Scale(make([]float32, T*2), rew, zeros, zeros, T, T, func(s []float64) error { give <- s; <-back; return nil })
	}()
	// b collected 15 steps only.
	err := b.Scale(make([]float32, 15*2), rew, zeros, zeros, 15, T, func(s []float64) error {
		other := <-give
		for i := range s {
			s[i] += other[i]
			other[i] = s[i]
		}
		back <- struct{}{}
		return nil
	})
	if err := errors.Join(err, <-errA); err != nil {
		t.Fatal(err)
	}
	if a.Mean[0] != b.Mean[0] || a.Var[0] != b.Var[0] || a.Count != b.Count || a.Count != InitCount+35*2 {
		t.Fatalf("a: %v %v %v; b: %v %v %v", a.Count, a.Mean, a.Var, b.Count, b.Mean, b.Var)
	}
}

func TestRewardMarshal(t *testing.T) {
	r := NewReward(3, 0.99, 5)
	_ = r.Scale(make([]float32, 6), []float32{1, 2, 3, 4, 5, 6}, make([]float32, 6), make([]float32, 6), 2, 2, nil)
	b, _ := r.MarshalBinary()
	s := NewReward(3, 0.99, 0)
	if err := s.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if s.Count != r.Count || s.Mean[0] != r.Mean[0] || s.Var[0] != r.Var[0] || s.Clip != 5 || s.Returns[2] != r.Returns[2] {
		t.Fatalf("round trip: %+v, want %+v", s, r)
	}
	if err := NewReward(2, 0.99, 0).UnmarshalBinary(b); err == nil {
		t.Fatal("statistics of 3 envs restored for 2")
	}
	if err := NewObs(2, 0).UnmarshalBinary(b[:10]); err == nil {
		t.Fatal("truncated bytes decoded")
	}
}

// TestNoAllocs: scaling a rollout's rewards, adding observations and normalising them
// allocate nothing once the buffers exist.
func TestNoAllocs(t *testing.T) {
	const n, T, d = 8, 64, 5
	r := NewReward(n, 0.99, 0)
	o := NewObs(d, 0)
	rew, term, trunc, dst := make([]float32, n*T), make([]float32, n*T), make([]float32, n*T), make([]float32, n*T)
	obs, out := make([]float32, n*T*d), make([]float32, n*T*d)
	var f Frozen
	o.Freeze(&f)
	_ = r.Scale(dst, rew, term, trunc, T, T, nil)
	if a := testing.AllocsPerRun(10, func() {
		_ = r.Scale(dst, rew, term, trunc, T, T, nil)
		_ = o.Add(obs)
		o.Commit()
		o.Freeze(&f)
		_ = f.Apply(out, obs)
	}); a != 0 {
		t.Fatalf("%v allocations per rollout", a)
	}
}
