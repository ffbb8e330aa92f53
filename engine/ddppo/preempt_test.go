package ddppo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/towerrl/towerrl/engine/internal/enginetest"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/learner/mpi"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// TestDDPPOPreemptedUpdateEquivalence: with straggler preemption the ranks hold different
// numbers of rows, rank 0 four minibatches of 64 and rank 1 (preempted) 150 rows, two whole
// minibatches and 22 rows left over. Both step through the same 4 updates per pass, rank 1
// taking part in the last two with weight 0; over 2 passes the parameters are those of one
// process whose update k trains the union of the ranks' minibatches k (128 rows for k < 2, 64
// after), within 1e-6, and the same bits on both ranks.
func TestDDPPOPreemptedUpdateEquivalence(t *testing.T) {
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	rng := rand.New(rand.NewPCG(7, 3))
	const mb, updates, passes = 64, 4, 2
	rows := []int{4 * mb, 150}
	ranks := []*learner.SampleBatch{
		enginetest.RandomMinibatch(rng, rows[0], 2, enginetest.Scales{Ret: 1, Value: 0.1, LogP: 0.05}),
		enginetest.RandomMinibatch(rng, rows[1], 2, enginetest.Scales{Ret: 3, Value: 0.5, LogP: 0.05}),
	}
	loss := ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}
	newParams := func() *models.Params {
		params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return params
	}
	newAdam := func(p *models.Params) learner.Optimizer {
		return learner.NewAdam(p.Size(), learner.Constant(1e-3), 0.9, 0.999, 1e-5)
	}
	newTowers := func(params *models.Params, opt learner.Optimizer, n, rows int, coll learner.Collective, layout *learner.SampleBatch) *learner.Towers {
		tw, err := learner.NewTowers(learner.TowersConfig{N: n, Minibatch: rows, MaxGradNorm: 0.5, NormalizeAdvantages: true, Collective: coll},
			params.Data(), opt, layout, policy.Towers(params, &ppo.PPO{Coefs: loss}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tw.Close() })
		return tw
	}

	// One process: update k trains rank 0's rows [k·mb, (k+1)·mb), then rank 1's while it has
	// a whole minibatch k; two sets of towers (128 and 64 rows) share the parameters and Adam.
	single := newParams()
	opt := newAdam(single)
	union := learner.NewSampleBatch(rows[0]+rows[1], 4, 1, 0)
	block := learner.NewSampleBatch(mb, 4, 1, 0)
	var bounds [][2]int
	for k := range updates {
		lo := union.Len()
		for _, r := range ranks {
			if (k+1)*mb > r.Len() {
				continue
			}
			if err := r.CopyRange(block, k*mb, (k+1)*mb); err != nil {
				t.Fatal(err)
			}
			if err := union.Append(block); err != nil {
				t.Fatal(err)
			}
		}
		bounds = append(bounds, [2]int{lo, union.Len()})
	}
	both, alone := newTowers(single, opt, 1, 2*mb, nil, union), newTowers(single, opt, 1, mb, nil, union)
	for range passes {
		for _, bd := range bounds {
			tw := both
			if bd[1]-bd[0] == mb {
				tw = alone
			}
			if _, err := tw.Update(context.Background(), union, bd[0], bd[1]); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Two ranks, two towers each, through the weighted two-level collective.
	gs := mpi.InProcess(2)
	got := make([][]float32, 2)
	res := make([]learner.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		coll, err := mpi.NewCollective(gs[r], 2)
		if err != nil {
			t.Fatal(err)
		}
		b := learner.NewSampleBatch(rows[0], 4, 1, 0)
		b.Append(ranks[r])
		spare := b.NewLike(mb)
		if err := b.CopyRange(spare, 0, mb); err != nil {
			t.Fatal(err)
		}
		params := newParams()
		tw := newTowers(params, newAdam(params), 2, mb, coll, b)
		res[r].Stats = make([]float64, len(tw.StatNames()))
		wg.Go(func() {
			for range passes {
				if errs[r] = minibatchUpdates(context.Background(), tw, coll, b, nil, spare, mb, updates, &res[r]); errs[r] != nil {
					return
				}
			}
			got[r] = params.Data()
		})
	}
	wg.Wait()
	enginetest.SameAsOneProcess(t, single.Data(), got, errs, fmt.Sprintf("ranks of %d and %d rows vs 1 process on their union, %d updates", rows[0], rows[1], passes*updates))
	if res[0].Updates != passes*4 || res[1].Updates != passes*2 || res[1].Trained != passes*2*mb {
		t.Errorf("rank 0 made %d weighted updates, rank 1 %d of %d rows; want %d, %d of %d", res[0].Updates, res[1].Updates,
			res[1].Trained, passes*4, passes*2, passes*2*mb)
	}
}

// TestSyncRanks: how many ranks must finish collecting before the others stop early.
func TestSyncRanks(t *testing.T) {
	for _, tc := range []struct {
		frac       float64
		n, ranks   int
		preemption bool
	}{
		{0.6, 2, 2, false}, {0.5, 2, 1, true}, {0.6, 3, 2, true}, {0.6, 8, 5, true},
		{0.7, 10, 7, true}, {1, 4, 4, false}, {0.01, 4, 1, true},
	} {
		if got := syncRanks(tc.frac, tc.n); got != tc.ranks || (got < tc.n) != tc.preemption {
			t.Errorf("sync_frac %v of %d ranks: %d must finish, want %d", tc.frac, tc.n, got, tc.ranks)
		}
	}
}

// TestMinibatchUpdatesInOrder: a preempted rank's passes over its rows in their composed
// shuffled order (learner.RowOrder, what preemption.learn does) train to the bits of shuffling
// the rows in place before each pass (what it did before), with 150 rows: two whole minibatches
// of 64 a pass (22 rows sit it out), over 3 passes on 2 towers. (One rank alone cannot take the
// spare minibatch's weight-0 updates: the weights must not sum to 0.)
func TestMinibatchUpdatesInOrder(t *testing.T) {
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	const mb, updates, passes = 64, 2, 3
	data := enginetest.RandomMinibatch(rand.New(rand.NewPCG(2, 9)), 150, 2, enginetest.Scales{Ret: 2, Value: 0.3, LogP: 0.05})
	train := func(inOrder bool) []float32 {
		params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		coll, err := mpi.NewCollective(mpi.InProcess(1)[0], 2)
		if err != nil {
			t.Fatal(err)
		}
		tw, err := learner.NewTowers(learner.TowersConfig{N: 2, Minibatch: mb, MaxGradNorm: 0.5, NormalizeAdvantages: true, Collective: coll},
			params.Data(), learner.NewAdam(params.Size(), learner.Constant(1e-3), 0.9, 0.999, 1e-5), data,
			policy.Towers(params, &ppo.PPO{Coefs: ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}}))
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		b := learner.NewSampleBatch(data.Len(), 4, 1, 0)
		b.Append(data)
		spare := b.NewLike(mb)
		if err := b.CopyRange(spare, 0, mb); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(4, 4))
		order, sh := learner.NewRowOrder(b.Len()), learner.NewShuffler(b)
		order.Reset(b.Len())
		res := learner.Result{Stats: make([]float64, len(tw.StatNames()))}
		for range passes {
			var rows []int
			if inOrder {
				order.Shuffle(rng)
				rows = order.Rows()
			} else if err := sh.Shuffle(rng, b); err != nil {
				t.Fatal(err)
			}
			if err := minibatchUpdates(context.Background(), tw, coll, b, rows, spare, mb, updates, &res); err != nil {
				t.Fatal(err)
			}
		}
		if res.Updates != passes*2 {
			t.Fatalf("%d weighted updates, want %d", res.Updates, passes*2)
		}
		return params.Data()
	}
	want, got := train(false), train(true)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("parameter %d: %v in order, %v shuffled in place", i, got[i], want[i])
		}
	}
}
