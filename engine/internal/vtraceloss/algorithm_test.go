package vtraceloss

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// TestTargetsAreGAEReturns: Targets takes the rollout as on-policy (ρ = 1), where V-trace's
// v_s is GAE(λ)'s return: it equals package ppo's GAE returns (an independent
// implementation) on an interleaved rollout with terminations and truncations, and its
// advantages are r_s + γ·v_{s+1} − V(x_s) with GAE's bootstrapping.
func TestTargetsAreGAEReturns(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const T, N = 9, 3
	r := algo.Rollout{T: T, N: N, LastValues: make([]float32, N)}
	for _, p := range []*[]float32{&r.Rewards, &r.Values, &r.Terminated, &r.Truncated, &r.FinalValues} {
		*p = make([]float32, T*N)
	}
	for k := range T * N {
		r.Rewards[k], r.Values[k], r.FinalValues[k] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
		switch rng.IntN(6) {
		case 0:
			r.Terminated[k] = 1
		case 1:
			r.Truncated[k] = 1
		}
	}
	for i := range r.LastValues {
		r.LastValues[i] = float32(rng.NormFloat64())
	}
	for _, kind := range []Kind{IMPALA, APPO} {
		for _, lambda := range []float64{0.9, 1} {
			a, err := New(kind, algo.Settings{Gamma: 0.95, Lambda: lambda, ClipCoef: 0.2})
			if err != nil {
				t.Fatal(err)
			}
			adv, ret := make([]float32, T*N), make([]float32, T*N)
			if err := a.Targets(r, adv, ret); err != nil {
				t.Fatal(err)
			}
			gAdv, gRet := make([]float32, T*N), make([]float32, T*N)
			if err := ppo.GAE(ppo.GAEInput{T: T, N: N, Rewards: r.Rewards, Values: r.Values, Terminated: r.Terminated, Truncated: r.Truncated,
				FinalValues: r.FinalValues, LastValues: r.LastValues, Gamma: 0.95, Lambda: lambda}, gAdv, gRet); err != nil {
				t.Fatal(err)
			}
			for k := range T * N {
				next := float64(r.LastValues[k%N])
				switch {
				case r.Terminated[k] != 0:
					next = 0
				case r.Truncated[k] != 0:
					next = float64(r.FinalValues[k])
				case k+N < T*N:
					next = float64(gRet[k+N])
				}
				want := float64(r.Rewards[k]) + 0.95*next - float64(r.Values[k])
				if !near(float64(ret[k]), float64(gRet[k]), 1e-5, 1e-5) || !near(float64(adv[k]), want, 1e-5, 1e-5) {
					t.Fatalf("%s λ %v row %d: return %v advantage %v, GAE's return %v and advantage %v", kind, lambda, k, ret[k], adv[k], gRet[k], want)
				}
			}
		}
		a, _ := New(kind, algo.Settings{Gamma: 0.95, Lambda: 1, ClipCoef: 0.2})
		short := r
		short.LastValues = r.LastValues[:1]
		if err := a.Targets(short, make([]float32, T*N), make([]float32, T*N)); err == nil {
			t.Errorf("%s: 1 last value for %d envs accepted", kind, N)
		}
	}
}

// seqTower is a learner.Tower over towerrl's own MLP with a V-trace loss on whole sequences:
// what the engine's trainer builds for impala and appo (Heads.SeqLen set, rows in the
// batch's sequence order).
type seqTower struct {
	pol          *models.Policy
	loss         algo.Loss
	rows, seqLen int
	a            algo.Algorithm
}

func newSeqTower(params *models.Params, a algo.Algorithm, rows, seqLen int) (*seqTower, error) {
	pol, err := models.Build(G.NewGraph(), params, rows)
	if err != nil {
		return nil, err
	}
	h := algo.Heads{Spec: pol.Spec(), Rows: rows, Params: pol.Logits, Value: pol.Value, SeqLen: seqLen}
	if pol.Logits == nil {
		h.Params, h.LogStd = pol.Mean, pol.LogStd
	}
	t := &seqTower{pol: pol, rows: rows, seqLen: seqLen, a: a}
	if t.loss, err = a.Loss(h); err != nil {
		return nil, err
	}
	if err := pol.Backward(t.loss.Node()); err != nil {
		return nil, err
	}
	return t, pol.Compile()
}

func (t *seqTower) StatNames() []string { return t.a.StatNames() }
func (t *seqTower) Close() error        { return t.pol.Close() }
func (t *seqTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	// sequenceBatch numbers row t of sequence s as Version s·1000+t: the tower's rows must be
	// whole sequences in time order.
	if mb.Len() != t.rows {
		return fmt.Errorf("a tower of %d rows got %d", t.rows, mb.Len())
	}
	for k := range t.rows {
		if step := mb.Version[k] % 1000; step != int64(k%t.seqLen) || (step > 0 && mb.Version[k] != mb.Version[k-1]+1) {
			return fmt.Errorf("row %d holds step %d of sequence %d: the sequences are broken", k, step, mb.Version[k]/1000)
		}
	}
	copy(t.pol.ObsData(), mb.Obs[:t.rows*mb.ObsDim])
	if err := t.loss.Fill(mb, nil); err != nil {
		return err
	}
	if err := t.pol.Run(); err != nil {
		return err
	}
	t.loss.Stats(stats)
	return t.pol.Grads(grads)
}

// sequenceBatch is a learner batch of seqs random sequences of L steps with episode ends,
// each with stateDim values of (unused) initial state.
func sequenceBatch(rng *rand.Rand, spec head.Spec, seqs, L, stateDim int) *learner.SampleBatch {
	actDim := spec.ActionDim()
	if spec.Head == head.CategoricalKind {
		actDim = 1
	}
	b := learner.NewSequenceBatch(seqs*L, 4, actDim, stateDim)
	for k := range seqs * L {
		for j := range 4 {
			b.Obs[k*4+j] = float32(rng.NormFloat64())
		}
		for j := range actDim {
			if spec.Head == head.CategoricalKind {
				b.Actions[k] = float32(rng.IntN(spec.N))
			} else {
				b.Actions[k*actDim+j] = float32(rng.NormFloat64())
			}
		}
		b.Rewards[k], b.Values[k], b.NextValues[k] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())
		b.LogP[k] = float32(-1 - rng.Float64())
		b.Version[k] = int64(k/L*1000 + k%L)
		switch rng.IntN(8) {
		case 0:
			b.Terminated[k], b.NextValues[k] = 1, 0
		case 1:
			b.Truncated[k] = 1
		}
	}
	for range seqs {
		b.SeqLens = append(b.SeqLens, int32(L))
	}
	if err := b.SetLen(seqs * L); err != nil {
		panic(err)
	}
	return b
}

// TestTowersOnSequences: the losses build into towerrl's MLP graph and run through
// learner.Towers on a sequence batch; N towers splitting each minibatch by whole sequences
// update the parameters as one tower on the whole minibatch does (the loss is a mean over
// rows, each tower's V-trace runs over its own whole sequences), for both heads and both
// algorithms. The first update's loss equals the float64 reference over the policy's own
// outputs.
func TestTowersOnSequences(t *testing.T) {
	const L, seqs = 5, 12
	specs := []head.Spec{
		{Head: head.CategoricalKind, N: 3, ObsShape: []int{4}},
		{Head: head.GaussianKind, Low: []float32{-2, -2}, High: []float32{2, 2}, ObsShape: []int{4}},
	}
	for _, kind := range []Kind{IMPALA, APPO} {
		for _, spec := range specs {
			a, err := New(kind, algo.Settings{Gamma: 0.99, Lambda: 1, ClipCoef: 0.2, EntCoef: 0.01, VfCoef: 0.5, KLCoef: 0.1})
			if err != nil {
				t.Fatal(err)
			}
			data := sequenceBatch(rand.New(rand.NewPCG(4, uint64(kind))), spec, seqs, L, 0)
			train := func(n, mb int) ([]float32, []float64) {
				params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
				if err != nil {
					t.Fatal(err)
				}
				tw, err := learner.NewTowers(learner.TowersConfig{N: n, Minibatch: mb, MaxGradNorm: 0.5}, params.Data(),
					learner.NewAdam(params.Size(), learner.Constant(1e-3), 0, 0, 1e-5), data,
					func(_ int, _ device.Device, per int, _ []float32) (learner.Tower, error) {
						return newSeqTower(params, a, per*L, L)
					})
				if err != nil {
					t.Fatal(err)
				}
				defer tw.Close()
				var first []float64
				for lo := 0; lo+mb <= seqs; lo += mb {
					st, err := tw.Update(context.Background(), data, lo, lo+mb)
					if err != nil {
						t.Fatal(err)
					}
					if first == nil {
						first = append(first, st.Stats...)
					}
				}
				return params.Data(), first
			}
			one, stats1 := train(1, 6)
			for _, n := range []int{2, 3} {
				many, statsN := train(n, 6)
				worst := 0.0
				for k := range one {
					worst = math.Max(worst, math.Abs(float64(one[k]-many[k])))
				}
				if worst > 1e-5 || !near(statsN[0], stats1[0], 1e-5, 1e-6) {
					t.Errorf("%s %s: %d towers: parameters differ from one tower's by %.3g, loss %v vs %v", kind, spec.Head, n, worst, statsN[0], stats1[0])
				}
			}
			// The first update's loss (one tower, sequences 0..5) against the reference over
			// the initial policy's outputs on those rows.
			params, _ := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
			pol, err := models.Build(G.NewGraph(), params, 6*L)
			if err != nil {
				t.Fatal(err)
			}
			if err := pol.Compile(); err != nil {
				t.Fatal(err)
			}
			if err := pol.Forward(data.Obs[:6*L*4]); err != nil {
				t.Fatal(err)
			}
			c := &lossCase{kind: kind, c: a.Coefs(), gaussian: spec.Head != head.CategoricalKind, rows: 6 * L, seqLen: L}
			read := func(n *G.Node) []float64 {
				v, err := pol.Read(n)
				if err != nil {
					t.Fatal(err)
				}
				out := make([]float64, len(v))
				for i, x := range v {
					out[i] = float64(x)
				}
				return out
			}
			if c.gaussian {
				c.w, c.params, c.logStd = 2, read(pol.Mean), read(pol.LogStd)
			} else {
				c.w, c.params = 3, read(pol.Logits)
			}
			c.values = read(pol.Value)
			for _, col := range []struct {
				dst *[]float64
				src []float32
			}{{&c.acts, data.Actions}, {&c.bLogp, data.LogP}, {&c.rew, data.Rewards}, {&c.term, data.Terminated},
				{&c.trunc, data.Truncated}, {&c.next, data.NextValues}} {
				n := c.rows
				if col.dst == &c.acts && c.gaussian {
					n *= c.w
				}
				for _, x := range col.src[:n] {
					*col.dst = append(*col.dst, float64(x))
				}
			}
			pol.Close()
			logp, _ := refLogProbs(c, c.params, c.logStd)
			vs, adv := refTargets(c, logp, c.values)
			want, _ := refLoss(c, c.params, c.logStd, c.values, vs, adv)
			if !near(stats1[0], want, 1e-4, 1e-5) {
				t.Errorf("%s %s: the tower's first loss %.7g, the reference %.7g", kind, spec.Head, stats1[0], want)
			}
			t.Logf("%s %s: first loss %.6g (reference %.6g); 2 and 3 towers match 1", kind, spec.Head, stats1[0], want)
		}
	}
}

// TestLearnerShufflesSequences: through learner.New (the trainer's learner: the batch loaded
// into a stack, shuffled and split into minibatches every pass, each over towers), a sequence
// batch reaches every tower as whole time-ordered sequences, and the loss trains.
//
// The batch carries one (unused) state value per sequence: learner.New makes its stacks with
// NewSampleBatch from the layout's StateDim, which holds sequences only when StateDim > 0;
// a feed-forward sequence batch (StateDim 0) needs learner.New to make them with the layout's
// NewLike instead.
func TestLearnerShufflesSequences(t *testing.T) {
	const L, seqs = 4, 24
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	a, err := New(APPO, algo.Settings{Gamma: 0.99, Lambda: 1, ClipCoef: 0.2, EntCoef: 0.01, VfCoef: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	data := sequenceBatch(rand.New(rand.NewPCG(6, 6)), spec, seqs, L, 1)
	params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	before := append([]float32(nil), params.Data()...)
	tw, err := learner.NewTowers(learner.TowersConfig{N: 2, Minibatch: 6}, params.Data(),
		learner.NewAdam(params.Size(), learner.Constant(1e-3), 0, 0, 1e-5), data,
		func(_ int, _ device.Device, per int, _ []float32) (learner.Tower, error) {
			return newSeqTower(params, a, per*L, L)
		})
	if err != nil {
		t.Fatal(err)
	}
	l, err := learner.New(learner.Config{TrainBatch: seqs * L, SGDIters: 3, Seed: 9}, tw, data)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	}()
	for range 2 {
		if err := l.Submit(context.Background(), data); err != nil {
			t.Fatal(err)
		}
		r := <-l.Results()
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Updates != 3*seqs/6 || r.Trained != 3*seqs*L {
			t.Errorf("%d updates training %d rows, want %d and %d", r.Updates, r.Trained, 3*seqs/6, 3*seqs*L)
		}
		<-l.Released()
	}
	moved := false
	for k, w := range params.Data() {
		moved = moved || w != before[k]
	}
	if !moved {
		t.Error("the parameters did not move")
	}
}
