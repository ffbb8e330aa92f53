package policy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/enginetest"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
)

// wholeRows hides an algorithm's RowMean, so that its towers run every row at once.
type wholeRows struct{ algo.Algorithm }

func TestSplitRows(t *testing.T) {
	for _, c := range []struct {
		rows, most int
		want       []int
	}{
		{1024, 1024, []int{1024}},
		{1025, 1024, []int{513, 512}},
		{2048, 1024, []int{1024, 1024}},
		{2050, 1024, []int{684, 683, 683}},
		{8192, 1024, []int{1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024}},
	} {
		got := splitRows(c.rows, c.most)
		if !slices.Equal(got, c.want) {
			t.Errorf("splitRows(%d, %d) = %v, want %v", c.rows, c.most, got, c.want)
		}
	}
}

// TestPPOTowerInParts checks that a PPO tower over more than partRows rows, which runs them in
// parts, gives the loss of ONNX Runtime's float64 reference over all its rows, and the
// gradient and statistics of one graph over all of them (a tower of the same algorithm with
// RowMean hidden) to float32 rounding: for towerrl's own MLP and for an imported graph.
func TestPPOTowerInParts(t *testing.T) {
	const n = 2*partRows + 2 // three parts, of two sizes
	c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	t.Run("native", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 3))
		params, err := models.NewParams(models.Config{Spec: head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{4}}}, rng)
		if err != nil {
			t.Fatal(err)
		}
		for i := range params.Data() {
			params.Data()[i] += float32(rng.NormFloat64() * 0.3)
		}
		mb := enginetest.RandomMinibatch(rng, n, 3, enginetest.Scales{Ret: 1, Value: 0.5, LogP: 0.4})
		checkInParts(t, mb, params.Size(), refLoss(t, params, mb, c), func(a algo.Algorithm) func(rows int) (learner.Tower, error) {
			return func(rows int) (learner.Tower, error) { return newNativeTower(params, rows, a) }
		})
	})
	t.Run("imported", func(t *testing.T) {
		spec, f := mlpTanh(t)
		rng := rand.New(rand.NewPCG(5, 6))
		for i := range f.flat {
			f.flat[i] += float32(rng.NormFloat64() * 0.2)
		}
		mb := enginetest.RandomMinibatch(rng, n, 2, enginetest.Scales{Ret: 3, Value: 1, LogP: 0.3})
		b, err := f.Export(0)
		if err != nil {
			t.Fatal(err)
		}
		checkInParts(t, mb, len(f.flat), refLossOf(t, b, spec, mb, c), func(a algo.Algorithm) func(rows int) (learner.Tower, error) {
			return func(rows int) (learner.Tower, error) { return newForeignTower(f, rows, a) }
		})
	})
}

// mlpTanh imports testdata/mlp_tanh.onnx, a 4-observation MLP with a 2-action categorical
// head, and returns its spec.
func mlpTanh(t *testing.T) (head.Spec, *Foreign) {
	t.Helper()
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	f, err := loadForeign(context.Background(), readFile(t, "../../testdata/mlp_tanh.onnx"), spec, layout.Overrides{}, onnx.Config{}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	return spec, f
}

// checkInParts compares PPO's tower over mb in three parts (build's towers) with one tower over
// all its rows and with the reference loss ref.
func checkInParts(t *testing.T, mb *learner.SampleBatch, size int, ref float64, build func(algo.Algorithm) func(rows int) (learner.Tower, error)) {
	t.Helper()
	c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	grad := func(a algo.Algorithm, parts int) ([]float32, []float64) {
		tw, err := inParts(mb.Len(), a, build(a))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := tw.Close(); err != nil {
				t.Error(err)
			}
		}()
		pt, split := tw.(*partsTower)
		switch {
		case parts == 1 && split:
			t.Fatalf("%d parts for an algorithm without RowMean", len(pt.parts))
		case parts > 1 && (!split || len(pt.parts) != parts):
			t.Fatalf("not in %d parts", parts)
		}
		grads := make([]float32, size)
		stats := make([]float64, len(ppo.StatNames))
		// Twice: the second run must not add to the first.
		for range 2 {
			if err := tw.Grad(mb, grads, stats); err != nil {
				t.Fatal(err)
			}
		}
		return grads, stats
	}
	gotG, gotS := grad(&ppo.PPO{Coefs: c}, 3)
	wantG, wantS := grad(wholeRows{&ppo.PPO{Coefs: c}}, 1)
	if math.Abs(gotS[0]-ref) > 1e-5*math.Max(1, math.Abs(ref)) {
		t.Errorf("loss %.7f in parts, reference %.7f", gotS[0], ref)
	}
	for i, name := range ppo.StatNames {
		if math.Abs(gotS[i]-wantS[i]) > 1e-6*math.Max(1, math.Abs(wantS[i])) {
			t.Errorf("%s: %.9f in parts, %.9f at once", name, gotS[i], wantS[i])
		}
	}
	var scale float64
	for _, g := range wantG {
		scale = math.Max(scale, math.Abs(float64(g)))
	}
	for i := range wantG {
		if d := math.Abs(float64(gotG[i] - wantG[i])); d > 1e-5*scale {
			t.Fatalf("gradient %d: %g in parts, %g at once (largest entry %g)", i, gotG[i], wantG[i], scale)
		}
	}
	if gotS[5] <= 0 || gotS[5] >= 1 {
		t.Fatalf("clip fraction %v: the test should exercise both branches", gotS[5])
	}
}

// TestPPOTowerColumns: a PPO tower declares the columns it reads (learner.ColumnTower), and
// reads no other: with every other column of its minibatch NaN (versions −1), its gradient and
// statistics keep their bits. For towerrl's own MLP, in parts and at once, with categorical and
// Gaussian heads, and for an imported graph.
func TestPPOTowerColumns(t *testing.T) {
	c := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	a := &ppo.PPO{Coefs: c}
	check := func(t *testing.T, tw learner.Tower, mb *learner.SampleBatch, size int) {
		t.Helper()
		defer tw.Close()
		ct, ok := tw.(learner.ColumnTower)
		if !ok {
			t.Fatalf("%T is not a learner.ColumnTower", tw)
		}
		cols := ct.Columns()
		if want := learner.ColObs | learner.ColActions | learner.ColLogP | learner.ColValues | learner.ColAdvantages | learner.ColReturns; cols != want {
			t.Fatalf("columns %b, want %b", cols, want)
		}
		grad := func() ([]float32, []float64) {
			g, s := make([]float32, size), make([]float64, len(ppo.StatNames))
			if err := tw.Grad(mb, g, s); err != nil {
				t.Fatal(err)
			}
			return g, s
		}
		wantG, wantS := grad()
		nan := float32(math.NaN())
		for _, col := range []struct {
			c learner.Columns
			v []float32
		}{{learner.ColRewards, mb.Rewards}, {learner.ColTerminated, mb.Terminated}, {learner.ColTruncated, mb.Truncated},
			{learner.ColLogP, mb.LogP}, {learner.ColValues, mb.Values}, {learner.ColAdvantages, mb.Advantages},
			{learner.ColReturns, mb.Returns}, {learner.ColNextValues, mb.NextValues}} {
			if cols&col.c == 0 {
				for i := range col.v {
					col.v[i] = nan
				}
			}
		}
		for i := range mb.Version {
			mb.Version[i] = -1
		}
		gotG, gotS := grad()
		for i := range wantG {
			if math.Float32bits(gotG[i]) != math.Float32bits(wantG[i]) {
				t.Fatalf("gradient %d: %v with the other columns NaN, %v before", i, gotG[i], wantG[i])
			}
		}
		for i, name := range ppo.StatNames {
			if math.Float64bits(gotS[i]) != math.Float64bits(wantS[i]) {
				t.Fatalf("%s: %v with the other columns NaN, %v before", name, gotS[i], wantS[i])
			}
		}
	}
	for _, h := range []head.Spec{{Head: head.CategoricalKind, N: 3, ObsShape: []int{4}}, {Head: head.GaussianKind, N: 2, ObsShape: []int{5}, Low: []float32{-1, -1}, High: []float32{1, 1}}} {
		for _, rows := range []int{300, partRows + 300} {
			t.Run(fmt.Sprintf("%s/%d", h.Head, rows), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, uint64(rows)))
				params, err := models.NewParams(models.Config{Spec: h}, rng)
				if err != nil {
					t.Fatal(err)
				}
				tw, err := inParts(rows, a, func(n int) (learner.Tower, error) { return newNativeTower(params, n, a) })
				if err != nil {
					t.Fatal(err)
				}
				check(t, tw, headMinibatch(rng, rows, h), params.Size())
			})
		}
	}
	t.Run("imported", func(t *testing.T) {
		spec, f := mlpTanh(t)
		rng := rand.New(rand.NewPCG(8, 9))
		tw, err := newForeignTower(f, 200, a)
		if err != nil {
			t.Fatal(err)
		}
		check(t, tw, headMinibatch(rng, 200, spec), len(f.flat))
	})
}

// TestPartsUnderBF16: a PPO tower's parts are of at most partRows rows whether the products run
// in bfloat16 or in float32 (with either, 2,100 rows are five parts of 420).
func TestPartsUnderBF16(t *testing.T) {
	a := &ppo.PPO{Coefs: ppo.Coefs{ClipCoef: 0.2, VfCoef: 0.5, EntCoef: 0.01}}
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	parts := func() []int {
		t.Helper()
		tw, err := inParts(2100, a, func(n int) (learner.Tower, error) { return newNativeTower(params, n, a) })
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		var rows []int
		for _, p := range tw.(*partsTower).parts {
			rows = append(rows, p.rows)
		}
		return rows
	}
	want := []int{420, 420, 420, 420, 420}
	kernels.SetPrecision(kernels.BF16)
	got := parts()
	kernels.SetPrecision(kernels.Float32)
	if !slices.Equal(got, want) {
		t.Fatalf("2,100 rows with bf16 products in parts of %v, want %v", got, want)
	}
	if got := parts(); !slices.Equal(got, want) {
		t.Fatalf("2,100 rows with float32 products in parts of %v, want %v", got, want)
	}
}
