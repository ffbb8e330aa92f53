package learner

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/towerrl/towerrl/device"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Adam by hand (β₁ 0.9, β₂ 0.999, ε 1e-8, lr 0.1) from p = 1 with gradients 0.5, -0.2, 0.1:
// t=1: m = 0.05, v = 2.5e-4, m̂ = 0.5, v̂ = 0.25, p = 1 - 0.1·0.5/0.5 = 0.9 (+2e-9 from ε);
// t=2: m = 0.025, v = 2.8975e-4, m̂ = 0.025/0.19, v̂ = 2.8975e-4/0.001999, p = 0.86543942;
// t=3: p = 0.82750024 (the same recurrence once more). PyTorch 1.13's float32 Adam
// (torch.optim.Adam, same settings) gives 0.900000036, 0.865439475, 0.827500284; float32
// rounding keeps us within 2e-7 of it.
func TestAdamByHand(t *testing.T) {
	a := NewAdam(1, Constant(0.1), 0, 0, 0)
	p := []float32{1}
	for i, c := range []struct{ g, want, torch float64 }{{0.5, 0.900000002, 0.900000036}, {-0.2, 0.8654394181, 0.865439475}, {0.1, 0.8275002408, 0.827500284}} {
		if err := a.Step(p, []float32{float32(c.g)}); err != nil {
			t.Fatal(err)
		}
		if math.Abs(float64(p[0])-c.torch) > 2e-7 || math.Abs(float64(p[0])-c.want) > 5e-7 {
			t.Fatalf("step %d: p = %.9f, want %.9f", i+1, p[0], c.want)
		}
	}
	if a.Steps() != 3 {
		t.Fatalf("steps %d", a.Steps())
	}
	if err := a.Step(p, []float32{1, 2}); err == nil {
		t.Fatal("Adam accepted 2 gradients for 1 parameter")
	}
}

// SGD with momentum 0.9, lr 0.1 from p = 1: b = 0.5, p = 0.95; b = 0.9·0.5 - 0.2 = 0.25, p = 0.925.
func TestSGDByHand(t *testing.T) {
	s := NewSGD(1, Constant(0.1), 0.9)
	p := []float32{1}
	s.Step(p, []float32{0.5})
	s.Step(p, []float32{-0.2})
	if math.Abs(float64(p[0])-0.925) > 1e-7 {
		t.Fatalf("p = %v, want 0.925", p[0])
	}
	plain := NewSGD(1, Constant(0.5), 0)
	q := []float32{1}
	plain.Step(q, []float32{0.4})
	if q[0] != 0.8 {
		t.Fatalf("plain SGD p = %v, want 0.8", q[0])
	}
}

func TestScheduleAndClip(t *testing.T) {
	l := Linear{Start: 2.5e-4, End: 0, Steps: 10}
	for step, want := range map[int]float64{0: 2.5e-4, 5: 1.25e-4, 10: 0, 20: 0} {
		if got := l.LR(step); math.Abs(got-want) > 1e-12 {
			t.Errorf("LR(%d) = %v, want %v", step, got, want)
		}
	}
	g := []float32{3, 4}
	if n := ClipGlobalNorm(g, 1); n != 5 || math.Abs(float64(g[0])-0.6) > 1e-6 || math.Abs(float64(g[1])-0.8) > 1e-6 {
		t.Fatalf("norm %v grads %v, want 5 and [0.6 0.8]", n, g)
	}
	h := []float32{0.3, 0.4}
	if ClipGlobalNorm(h, 1); h[0] != 0.3 || h[1] != 0.4 {
		t.Fatalf("clipped a gradient under the bound: %v", h)
	}
}

// TestClipGlobalNormBlocks: over several norm blocks the norm is the root of the blocks'
// square sums (each in its four-way order) added in block order, within 1e-12 of the exact
// float64 norm, and clipping scales by maxNorm/(norm+1e-6) rounded to float32.
func TestClipGlobalNormBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 9))
	g := make([]float32, 3*normBlock+7)
	for i := range g {
		g[i] = float32(rng.NormFloat64())
	}
	orig := append([]float32(nil), g...)
	var blocks, exact float64
	for b := 0; b < len(g); b += normBlock {
		blocks += squaresRef(g[b:min(b+normBlock, len(g))])
	}
	for _, v := range g {
		exact += float64(v) * float64(v)
	}
	norm := ClipGlobalNorm(g, 1)
	if norm != math.Sqrt(blocks) || math.Abs(norm-math.Sqrt(exact)) > 1e-12*norm {
		t.Fatalf("norm %v, want %v (blocks) ≈ %v", norm, math.Sqrt(blocks), math.Sqrt(exact))
	}
	c := float32(1 / (norm + 1e-6))
	for i := range g {
		if g[i] != orig[i]*c {
			t.Fatalf("value %d clipped to %v, want %v", i, g[i], orig[i]*c)
		}
	}
}

func fill(b *SampleBatch, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range n * b.ObsDim {
		b.Obs[i] = float32(rng.NormFloat64())
	}
	for i := range n {
		b.Actions[i*b.ActDim] = float32(i % 2)
		b.Advantages[i] = float32(rng.NormFloat64()*2 + 0.5)
		b.Returns[i] = float32(rng.NormFloat64())
		b.Version[i] = int64(i) // a row id
	}
	b.SetLen(n)
}

func TestSampleBatchOps(t *testing.T) {
	a := NewSampleBatch(100, 3, 1, 0)
	fill(a, 40, 1)
	b := NewSampleBatch(100, 3, 1, 0)
	fill(b, 30, 2)
	if err := a.Append(b); err != nil || a.Len() != 70 || a.Obs[40*3] != b.Obs[0] || a.Version[69] != 29 {
		t.Fatalf("append: %v len %d", err, a.Len())
	}
	if err := a.Append(a); err == nil {
		t.Fatal("append past the capacity accepted")
	}
	c := NewSampleBatch(10, 3, 1, 0)
	if err := a.CopyRange(c, 40, 50); err != nil || c.Len() != 10 || c.Version[0] != 0 || c.Obs[2] != b.Obs[2] {
		t.Fatalf("copy range: %v", err)
	}
	if err := a.CopyRange(c, 0, 11); err == nil {
		t.Fatal("copied 11 rows into 10")
	}
	// Shuffle permutes whole rows: every id once, each row's columns still together.
	s := NewShuffler(a)
	obsOf := map[int64][3]float32{}
	for i := range a.Len() {
		obsOf[a.Version[i]+int64(i/40)*1000] = [3]float32{a.Obs[i*3], a.Obs[i*3+1], a.Obs[i*3+2]}
	}
	for i := 40; i < 70; i++ {
		a.Version[i] += 1000
	}
	if err := s.Shuffle(rand.New(rand.NewPCG(3, 3)), a); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	moved := 0
	for i := range a.Len() {
		id := a.Version[i]
		if seen[id] || [3]float32{a.Obs[i*3], a.Obs[i*3+1], a.Obs[i*3+2]} != obsOf[id] {
			t.Fatalf("row %d (id %d) torn or duplicated", i, id)
		}
		seen[id] = true
		if id != int64(i) && !(i >= 40 && id == int64(i-40)+1000) {
			moved++
		}
	}
	if moved < 50 {
		t.Fatalf("only %d of 70 rows moved", moved)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	if n := testing.AllocsPerRun(10, func() { s.Shuffle(rng, a); a.CopyRange(c, 5, 15) }); n != 0 {
		t.Fatalf("%v allocations per shuffle", n)
	}
}

func TestRecurrentShuffleKeepsSequences(t *testing.T) {
	b := NewSampleBatch(20, 1, 1, 2)
	lens := []int32{3, 5, 2, 6, 4}
	row := 0
	for k, l := range lens {
		for j := range int(l) {
			b.Obs[row] = float32(k*100 + j) // sequence k, step j
			row++
		}
		b.SeqLens = append(b.SeqLens, l)
		b.State[k*2], b.State[k*2+1] = float32(k), float32(-k)
	}
	b.SetLen(row)
	if err := NewShuffler(b).Shuffle(rand.New(rand.NewPCG(9, 9)), b); err != nil {
		t.Fatal(err)
	}
	row = 0
	for s, l := range b.SeqLens {
		k := int(b.Obs[row]) / 100
		if lens[k] != l || b.State[s*2] != float32(k) || b.State[s*2+1] != float32(-k) {
			t.Fatalf("sequence %d: length %d state %v, from sequence %d", s, l, b.State[s*2:s*2+2], k)
		}
		for j := range int(l) {
			if b.Obs[row+j] != float32(k*100+j) {
				t.Fatalf("sequence %d broken at step %d", k, j)
			}
		}
		row += int(l)
	}
	// Splitting by sequences: sequences [1, 3) are rows of lengths lens[perm...].
	c := NewSampleBatch(20, 1, 1, 2)
	if err := b.CopyRange(c, 1, 3); err != nil || c.Len() != int(b.SeqLens[1]+b.SeqLens[2]) || len(c.SeqLens) != 2 {
		t.Fatalf("sequence range: %v, %d rows", err, c.Len())
	}
}

func TestLocalAllReduce(t *testing.T) {
	const n = 3
	l := NewLocal(n)
	for round := range 5 {
		bufs := make([][]float32, n)
		want := make([]float32, 4)
		for i := range bufs {
			bufs[i] = []float32{float32(i), float32(round), float32(i * i), 1}
		}
		for j := range want {
			// Sum in member order, then scale: what the reduction promises bit for bit.
			var s float32
			for i := range bufs {
				s += bufs[i][j]
			}
			want[j] = s * (1 / float32(n))
		}
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := l.AllReduce(context.Background(), i, bufs[i]); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for i := range n {
			for j := range want {
				if bufs[i][j] != want[j] {
					t.Fatalf("round %d member %d: %v, want %v", round, i, bufs[i], want)
				}
			}
		}
	}
}

// linearTower fits y ≈ w·x + b to the (normalised) advantages with the mean squared error,
// gradients worked by hand: ∂/∂w = mean(e·x), ∂/∂b = mean(e), e = w·x + b − A.
type linearTower struct {
	params []float32
	obs    int
	record func(ids []int64)
}

func (l *linearTower) StatNames() []string { return []string{"loss"} }
func (l *linearTower) Close() error        { return nil }
func (l *linearTower) Grad(mb *SampleBatch, grads []float32, stats []float64) error {
	clear(grads)
	n := mb.Len()
	var loss float64
	for i := range n {
		e := l.params[l.obs] - mb.Advantages[i]
		for k := range l.obs {
			e += l.params[k] * mb.Obs[i*l.obs+k]
		}
		loss += 0.5 * float64(e) * float64(e) / float64(n)
		for k := range l.obs {
			grads[k] += e * mb.Obs[i*l.obs+k] / float32(n)
		}
		grads[l.obs] += e / float32(n)
	}
	stats[0] = loss
	if l.record != nil {
		l.record(mb.Version[:n])
	}
	return nil
}

func linearFactory(record func([]int64)) TowerFactory {
	return func(_ int, _ device.Device, _ int, params []float32) (Tower, error) {
		return &linearTower{params: params, obs: 3, record: record}, nil
	}
}

// TestTowersEquivalence: N towers averaging their gradients make the same updates as one tower
// on the whole minibatch, for N = 1, 2, 3 and a minibatch (100) that 3 does not divide.
func TestTowersEquivalence(t *testing.T) {
	data := NewSampleBatch(400, 3, 1, 0)
	fill(data, 400, 7)
	train := func(n, mb int) []float32 {
		tw, params, b := linearTowers(t, n, mb, data)
		for lo := 0; lo+mb <= 400; lo += mb {
			st, err := tw.Update(context.Background(), b, lo, lo+mb)
			if err != nil {
				t.Fatal(err)
			}
			if st.Rows != mb/n*n || st.Stats[0] <= 0 {
				t.Fatalf("N=%d: %+v", n, st)
			}
		}
		return params
	}
	for _, mb := range []int{96, 100} {
		// One tower on the rows N towers use: the truncation to a multiple of 3 drops 1 of 100.
		for _, n := range []int{2, 3} {
			ref := train(1, mb/n*n)
			if mb%n != 0 {
				// Re-run with one tower on the truncated ranges of each minibatch of mb rows.
				ref = trainTruncated(t, data, mb, mb/n*n)
			}
			got := train(n, mb)
			for k := range got {
				if math.Abs(float64(got[k]-ref[k])) > 1e-5 {
					t.Fatalf("minibatch %d, %d towers: params %v, one tower %v", mb, n, got, ref)
				}
			}
		}
	}
}

// TestUpdateRowsMatchesShuffle: training by rows in a composed order (what the learner does
// with a feed-forward stack) gives the bits of shuffling the batch before each pass and
// training on its ranges: the same parameters, and the same standardised advantages in each
// row, for 1 to 3 towers and minibatches that the towers and the batch do not divide.
func TestUpdateRowsMatchesShuffle(t *testing.T) {
	const rows, passes = 250, 3
	data := NewSampleBatch(rows, 3, 1, 0)
	fill(data, rows, 11)
	for _, n := range []int{1, 2, 3} {
		for _, mb := range []int{64, 100} {
			train := func(byRows bool) ([]float32, *SampleBatch) {
				tw, params, b := linearTowers(t, n, mb, data)
				sh, rng := NewShuffler(b), rand.New(rand.NewPCG(5, 6))
				ro := NewRowOrder(rows + 10)
				ro.Reset(rows)
				for range passes {
					if byRows {
						ro.Shuffle(rng)
					} else if err := sh.Shuffle(rng, b); err != nil {
						t.Fatal(err)
					}
					for lo := 0; lo+n <= rows; lo += mb {
						hi := min(lo+mb, rows)
						var err error
						if byRows {
							_, err = tw.UpdateRows(context.Background(), b, ro.Rows(), lo, hi)
						} else {
							_, err = tw.Update(context.Background(), b, lo, hi)
						}
						if err != nil {
							t.Fatal(err)
						}
					}
				}
				if byRows { // put the rows in the shuffled order to compare them
					sorted := NewSampleBatch(rows, 3, 1, 0)
					if err := sorted.gatherFrom(b, ro.Rows(), AllColumns); err != nil {
						t.Fatal(err)
					}
					b = sorted
				}
				return params, b
			}
			want, wantB := train(false)
			got, gotB := train(true)
			for k := range got {
				if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
					t.Fatalf("%d towers, minibatch %d: params %v by rows, %v shuffled", n, mb, got, want)
				}
			}
			for i := range rows {
				if gotB.Version[i] != wantB.Version[i] || math.Float32bits(gotB.Advantages[i]) != math.Float32bits(wantB.Advantages[i]) {
					t.Fatalf("%d towers, minibatch %d: row %d is %d (advantage %v) by rows, %d (%v) shuffled", n, mb, i,
						gotB.Version[i], gotB.Advantages[i], wantB.Version[i], wantB.Advantages[i])
				}
			}
		}
	}
}

// linearTowers makes n towers of linearFactory's model over minibatches of mb rows, with
// gradient clipping at 0.5, standardised advantages and Adam at lr 0.05 from the parameters
// (0.1, -0.2, 0.3, 0), which it returns, and a copy of data to train on. They are closed when
// the test ends.
func linearTowers(t *testing.T, n, mb int, data *SampleBatch) (*Towers, []float32, *SampleBatch) {
	t.Helper()
	params := []float32{0.1, -0.2, 0.3, 0}
	cfg := TowersConfig{N: n, Minibatch: mb, MaxGradNorm: 0.5, NormalizeAdvantages: true}
	tw, err := NewTowers(cfg, params, NewAdam(4, Constant(0.05), 0, 0, 1e-5), data, linearFactory(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	b := NewSampleBatch(data.Len(), 3, 1, 0)
	b.Append(data)
	return tw, params, b
}

// trainTruncated trains one tower on rows [lo, lo+use) of each minibatch [lo, lo+mb).
func trainTruncated(t *testing.T, data *SampleBatch, mb, use int) []float32 {
	tw, params, b := linearTowers(t, 1, use, data)
	for lo := 0; lo+mb <= 400; lo += mb {
		if _, err := tw.Update(context.Background(), b, lo, lo+use); err != nil {
			t.Fatal(err)
		}
	}
	return params
}

func TestTowersSplitErrors(t *testing.T) {
	layout := NewSampleBatch(10, 3, 1, 0)
	if _, err := NewTowers(TowersConfig{N: 4, Minibatch: 3}, make([]float32, 4), NewSGD(4, Constant(1), 0), layout, linearFactory(nil)); err == nil {
		t.Fatal("4 towers for a minibatch of 3 accepted")
	}
	tw, err := NewTowers(TowersConfig{N: 2, Minibatch: 8}, make([]float32, 4), NewSGD(4, Constant(1), 0), layout, linearFactory(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	fill(layout, 10, 1)
	if _, err := tw.Update(context.Background(), layout, 0, 1); err == nil {
		t.Fatal("1 row over 2 towers accepted")
	}
}
