package learner

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/internal/spin"
)

// wideTower is linearTower over obs inputs and width outputs, y = W·x + b, fitting every output
// to the advantage: a parameter vector of several norm blocks, for the sharded step.
type wideTower struct {
	params     []float32
	obs, width int
	fail       func() bool // when set and true, Grad fails
}

var errTower = errors.New("tower failed on purpose")

func (w *wideTower) StatNames() []string { return []string{"loss"} }
func (w *wideTower) Close() error        { return nil }
func (w *wideTower) Grad(mb *SampleBatch, grads []float32, stats []float64) error {
	if w.fail != nil && w.fail() {
		return errTower
	}
	clear(grads)
	n := mb.Len()
	var loss float64
	bias := w.params[w.obs*w.width:]
	for i := range n {
		x := mb.Obs[i*w.obs : (i+1)*w.obs]
		for o := range w.width {
			e := bias[o] - mb.Advantages[i]
			row := w.params[o*w.obs : (o+1)*w.obs]
			for k, v := range x {
				e += row[k] * v
			}
			loss += 0.5 * float64(e) * float64(e) / float64(n)
			g := grads[o*w.obs : (o+1)*w.obs]
			for k, v := range x {
				g[k] += e * v / float32(n)
			}
			grads[w.obs*w.width+o] += e / float32(n)
		}
	}
	stats[0] = loss
	return nil
}

const wideObs, wideWidth = 3, 400 // 1600 parameters: four norm blocks, the last one short

func wideFactory(fail func(i int) bool) TowerFactory {
	return func(i int, _ device.Device, _ int, params []float32) (Tower, error) {
		w := &wideTower{params: params, obs: wideObs, width: wideWidth}
		if fail != nil {
			w.fail = func() bool { return fail(i) }
		}
		return w, nil
	}
}

func wideParams() []float32 {
	p := make([]float32, wideObs*wideWidth+wideWidth)
	for i := range p {
		p[i] = float32(math.Sin(float64(i))) * 0.3
	}
	return p
}

// hiddenOptimizer hides an optimiser's ability to step in ranges: Update steps it serially.
type hiddenOptimizer struct{ Optimizer }

// hiddenCollective hides that a collective is a Local: the towers call AllReduce.
type hiddenCollective struct{ Collective }

// TestShardedStepBits: with 2 and 3 towers, the towers' shared step (after meanShard with the
// default Local, or after AllReduce with another collective) gives the bits of one serial step
// after the average, for Adam and SGD with momentum, with clipping at work, and the same
// gradient norms; a second run repeats them exactly.
func TestShardedStepBits(t *testing.T) {
	data := NewSampleBatch(240, wideObs, 1, 0)
	fill(data, 240, 11)
	type result struct {
		params []float32
		norms  []float64
	}
	train := func(n int, opt Optimizer, coll Collective, params []float32) result {
		tw, err := NewTowers(TowersConfig{N: n, Minibatch: 60, MaxGradNorm: 0.05, NormalizeAdvantages: true, Collective: coll},
			params, opt, data, wideFactory(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		b := NewSampleBatch(240, wideObs, 1, 0)
		var r result
		for epoch := range 2 {
			b.Reset()
			b.Append(data)
			for lo := 0; lo+60 <= 240; lo += 60 {
				st, err := tw.Update(context.Background(), b, lo, lo+60)
				if err != nil {
					t.Fatalf("epoch %d: %v", epoch, err)
				}
				r.norms = append(r.norms, st.GradNorm)
			}
		}
		if tw.Version() != 8 {
			t.Fatalf("version %d after 8 updates", tw.Version())
		}
		r.params = params
		return r
	}
	opts := map[string]func(size int) Optimizer{
		"adam": func(size int) Optimizer { return NewAdam(size, Constant(0.01), 0, 0, 1e-5) },
		"sgd":  func(size int) Optimizer { return NewSGD(size, Constant(0.05), 0.9) },
	}
	for name, mk := range opts {
		for _, n := range []int{2, 3} {
			size := len(wideParams())
			serial := train(n, hiddenOptimizer{mk(size)}, nil, wideParams())
			for _, variant := range []struct {
				what string
				coll Collective
			}{{"meanShard", nil}, {"AllReduce", hiddenCollective{NewLocal(n)}}, {"meanShard again", nil}} {
				got := train(n, mk(size), variant.coll, wideParams())
				if !slices.Equal(got.norms, serial.norms) {
					t.Errorf("%s, %d towers, %s: norms %v, serial %v", name, n, variant.what, got.norms, serial.norms)
				}
				for k := range got.params {
					if math.Float32bits(got.params[k]) != math.Float32bits(serial.params[k]) {
						t.Fatalf("%s, %d towers, %s: parameter %d = %v, serial step %v", name, n, variant.what, k, got.params[k], serial.params[k])
					}
				}
			}
			if clipped := slices.IndexFunc(serial.norms, func(v float64) bool { return v > 0.05 }); clipped < 0 {
				t.Errorf("%s: no update was clipped (norms %v): the test does not exercise clipping", name, serial.norms)
			}
		}
	}
}

// TestTowersGradError: when one of two towers fails, Update returns its error and applies
// nothing (parameters, version and optimiser steps unchanged), and the towers train on after.
func TestTowersGradError(t *testing.T) {
	data := NewSampleBatch(64, wideObs, 1, 0)
	fill(data, 64, 3)
	var failing sync.Map // tower index → fail on the next Grad
	params := wideParams()
	opt := NewAdam(len(params), Constant(0.01), 0, 0, 0)
	tw, err := NewTowers(TowersConfig{N: 2, Minibatch: 32, MaxGradNorm: 1}, params, opt, data,
		wideFactory(func(i int) bool { _, ok := failing.LoadAndDelete(i); return ok }))
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	if _, err := tw.Update(context.Background(), data, 0, 32); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(params)
	for _, i := range []int{1, 0} {
		failing.Store(i, true)
		if _, err := tw.Update(context.Background(), data, 32, 64); !errors.Is(err, errTower) {
			t.Fatalf("tower %d failing: Update = %v, want its error", i, err)
		}
		if !slices.Equal(params, before) || tw.Version() != 1 || opt.Steps() != 1 {
			t.Fatalf("tower %d failing: the update was applied (version %d, %d steps)", i, tw.Version(), opt.Steps())
		}
	}
	if _, err := tw.Update(context.Background(), data, 32, 64); err != nil || tw.Version() != 2 || opt.Steps() != 2 {
		t.Fatalf("after the failures: %v, version %d, %d steps", err, tw.Version(), opt.Steps())
	}
	if slices.Equal(params, before) {
		t.Fatal("the update after the failures changed nothing")
	}
}

// TestTowersWeightsConcurrent: Weights, called while two towers train, returns parameters
// that some update left whole (the ones recorded at its version), never a half-applied step.
func TestTowersWeightsConcurrent(t *testing.T) {
	data := NewSampleBatch(200, wideObs, 1, 0)
	fill(data, 200, 5)
	params := wideParams()
	tw, err := NewTowers(TowersConfig{N: 2, Minibatch: 20, MaxGradNorm: 0.5}, params, NewAdam(len(params), Constant(0.01), 0, 0, 0), data, wideFactory(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	var mu sync.Mutex // guards recorded
	recorded := map[int64][]float32{0: slices.Clone(params)}
	type snap struct {
		v int64
		p []float32
	}
	snaps := make(chan snap, 1000)
	done := make(chan struct{})
	go func() {
		defer close(snaps)
		for { // at least one snapshot, even when the updates are all done before this runs
			p := make([]float32, len(params))
			v, err := tw.Weights(p)
			if err != nil {
				t.Error(err)
				return
			}
			select {
			case snaps <- snap{v, p}:
			default:
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	for round := range 30 {
		lo := round % 10 * 20
		if _, err := tw.Update(context.Background(), data, lo, lo+20); err != nil {
			t.Fatal(err)
		}
		v, p := tw.Version(), slices.Clone(params) // no update runs here: Params may be read
		mu.Lock()
		recorded[v] = p
		mu.Unlock()
	}
	close(done)
	checked := 0
	for s := range snaps {
		mu.Lock()
		want, ok := recorded[s.v]
		mu.Unlock()
		if !ok || !slices.Equal(s.p, want) {
			t.Fatalf("Weights at version %d: not the parameters that update left", s.v)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no Weights snapshot taken")
	}
}

// TestTowersNoAllocs: an update of two towers allocates nothing in steady state (the towers'
// own Grad aside) when their waits spin; with spinning off a parked wait's wake-up allocates.
func TestTowersNoAllocs(t *testing.T) {
	data := NewSampleBatch(64, wideObs, 1, 0)
	fill(data, 64, 8)
	params := wideParams()
	tw, err := NewTowers(TowersConfig{N: 2, Minibatch: 64, MaxGradNorm: 0.5, NormalizeAdvantages: true}, params,
		NewAdam(len(params), Constant(1e-3), 0, 0, 0), data, wideFactory(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := tw.Update(context.Background(), data, 0, 64); err != nil {
			t.Fatal(err)
		}
	})
	if spin.Auto.Spins(2) && allocs != 0 {
		t.Fatalf("%v allocations per update", allocs)
	}
	t.Logf("%v allocations per update (spinning: %v)", allocs, spin.Auto.Spins(2))
}

// TestTowersNoSpin: towers that park at once instead of spinning compute the same bits.
func TestTowersNoSpin(t *testing.T) {
	data := NewSampleBatch(240, wideObs, 1, 0)
	fill(data, 240, 5)
	train := func(noSpin bool) []float32 {
		params := wideParams()
		tw, err := NewTowers(TowersConfig{N: 2, Minibatch: 60, MaxGradNorm: 0.05, NormalizeAdvantages: true, NoSpin: noSpin},
			params, NewAdam(len(params), Constant(0.01), 0, 0, 1e-5), data, wideFactory(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		b := NewSampleBatch(240, wideObs, 1, 0)
		b.Append(data)
		for lo := 0; lo+60 <= 240; lo += 60 {
			if _, err := tw.Update(context.Background(), b, lo, lo+60); err != nil {
				t.Fatal(err)
			}
		}
		return params
	}
	spinning, parked := train(false), train(true)
	for k := range spinning {
		if math.Float32bits(spinning[k]) != math.Float32bits(parked[k]) {
			t.Fatalf("parameter %d: %v spinning, %v parked", k, spinning[k], parked[k])
		}
	}
}

// TestTowersCrew: two sets of towers updating in turn on one Crew compute the bits each set
// computes on goroutines of its own; Run reaches every member; closing the Towers leaves the
// crew running; a crew of another size is refused.
func TestTowersCrew(t *testing.T) {
	data := NewSampleBatch(240, wideObs, 1, 0)
	fill(data, 240, 9)
	train := func(crew *Crew) [2][]float32 {
		var ps [2][]float32
		var tws [2]*Towers
		for k := range tws {
			ps[k] = wideParams()
			var err error
			tws[k], err = NewTowers(TowersConfig{N: 2, Minibatch: 60, MaxGradNorm: 0.05, Crew: crew},
				ps[k], NewAdam(len(ps[k]), Constant(0.01*float64(k+1)), 0, 0, 1e-5), data, wideFactory(nil))
			if err != nil {
				t.Fatal(err)
			}
		}
		for lo := 0; lo+60 <= 240; lo += 60 {
			for _, tw := range tws {
				if _, err := tw.Update(context.Background(), data, lo, lo+60); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, tw := range tws {
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return ps
	}
	crew := NewCrew(2, false)
	defer crew.Close()
	own, shared := train(nil), train(crew)
	for k := range own {
		for j := range own[k] {
			if math.Float32bits(own[k][j]) != math.Float32bits(shared[k][j]) {
				t.Fatalf("set %d, parameter %d: %v on a crew, %v on goroutines of its own", k, j, shared[k][j], own[k][j])
			}
		}
	}
	var ran [2]bool
	crew.Run(func(i int) { ran[i] = true }) // after the Towers' Close
	if ran != [2]bool{true, true} {
		t.Errorf("Run reached %v", ran)
	}
	params := wideParams()
	if _, err := NewTowers(TowersConfig{N: 3, Minibatch: 60, Crew: crew}, params, NewAdam(len(params), Constant(0.01), 0, 0, 0),
		data, wideFactory(nil)); !errors.Is(err, ErrConfig) {
		t.Errorf("3 towers on a crew of 2: %v, want ErrConfig", err)
	}
}

// columnTower is linearTower declaring that it reads the observations, the advantages and the
// versions (its rows' ids) alone; check, when set, inspects each slice it is given.
type columnTower struct {
	linearTower
	check func(mb *SampleBatch)
}

func (c *columnTower) Columns() Columns { return ColObs | ColAdvantages | ColVersion }
func (c *columnTower) Grad(mb *SampleBatch, grads []float32, stats []float64) error {
	c.check(mb)
	return c.linearTower.Grad(mb, grads, stats)
}

// TestColumnTowerGathersItsColumns: trained by rows in a shuffled order, a ColumnTower's slice
// holds its rows' values in the columns it declares, and nothing in the others (its slice is
// fresh, so they stay zero); the parameters are those of a tower that gets every column.
func TestColumnTowerGathersItsColumns(t *testing.T) {
	const rows, mb = 120, 40
	data := NewSampleBatch(rows, 3, 1, 0)
	fill(data, rows, 5)
	for i := range rows {
		data.Rewards[i], data.Terminated[i], data.Truncated[i] = 1, 1, 1
		data.LogP[i], data.Values[i], data.NextValues[i] = -1, 2, 3
	}
	train := func(factory TowerFactory) []float32 {
		params := []float32{0.1, -0.2, 0.3, 0}
		cfg := TowersConfig{N: 2, Minibatch: mb, NormalizeAdvantages: true}
		tw, err := NewTowers(cfg, params, NewAdam(4, Constant(0.05), 0, 0, 1e-5), data, factory)
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		b := NewSampleBatch(rows, 3, 1, 0)
		b.Append(data)
		order := make([]int, rows)
		for i := range order {
			order[i] = (i * 7) % rows // 7 and 120 are coprime: a permutation
		}
		for lo := 0; lo < rows; lo += mb {
			if _, err := tw.UpdateRows(context.Background(), b, order, lo, lo+mb); err != nil {
				t.Fatal(err)
			}
		}
		return params
	}
	var mu sync.Mutex
	var seen int
	got := train(func(_ int, _ device.Device, _ int, params []float32) (Tower, error) {
		return &columnTower{linearTower: linearTower{params: params, obs: 3}, check: func(s *SampleBatch) {
			mu.Lock()
			defer mu.Unlock()
			for i := range s.Len() {
				r := int(s.Version[i]) // fill's row id
				if !slices.Equal(s.Obs[i*3:i*3+3], data.Obs[r*3:r*3+3]) || s.Actions[i] != 0 || s.Returns[i] != 0 ||
					s.Rewards[i] != 0 || s.Terminated[i] != 0 || s.Truncated[i] != 0 || s.LogP[i] != 0 || s.Values[i] != 0 || s.NextValues[i] != 0 {
					t.Errorf("slice row %d (batch row %d): obs %v action %v, returns %v rewards %v terminated %v truncated %v logp %v values %v next %v",
						i, r, s.Obs[i*3:i*3+3], s.Actions[i], s.Returns[i], s.Rewards[i], s.Terminated[i], s.Truncated[i], s.LogP[i], s.Values[i], s.NextValues[i])
					return
				}
				seen++
			}
		}}, nil
	})
	want := train(linearFactory(nil))
	if seen != rows {
		t.Fatalf("the towers saw %d rows, want %d", seen, rows)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("params %v reading some columns, %v reading all", got, want)
	}
}
