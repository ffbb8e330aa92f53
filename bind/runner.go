package bind

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// Runner runs a Policy for one worker of n envs: one ONNX Runtime session, on CPU memory, and
// the head's sampling. Each env has its own random stream, so actions do not depend on how envs
// are spread over workers. A Runner belongs to one goroutine at a time (the worker's), except
// Stage, which may be called from any goroutine.
//
// A policy with a dynamic batch runs all rows in one call and its head reads the session's
// output buffers directly. A policy whose fixed batch could not be freed runs one fixed batch
// per call (rows padded with stale ones), its outputs gathered into buffers of all rows.
type Runner struct {
	sess          *onnx.Session
	spec          head.Spec
	outs          head.Outputs
	fd            feeds
	scaled        bool         // the graph's own actions are in env units (tanh-gaussian)
	rngs          []*rand.Rand // one per env, owned by the worker
	pcgs          []*rand.PCG  // their sources when NewRunnerPCG made the Runner, else nil
	u             []float64    // scratch: the rows' uniform numbers drawn from pcgs
	deterministic bool
	version       int64 // the policy version of the weights the session reads
	// explore is the exploration rate StageExplore gave, when hasExplore (see there).
	explore    float64
	hasExplore bool
	inference  time.Duration
	turn       sync.Locker // held around each ONNX Runtime call when set (SetTurn); nil: none
	fed        *fed        // the published weights' buffers; nil when the policy is not published in place

	chunk  int  // rows per call
	fixed  bool // static batch: every call runs exactly chunk rows
	obsRow int  // elements per observation
	obs    []float32
	obsAny numeric // the observation input when it is not float32
	starts numeric // episode_starts input; nil without one
	stIn   [][]float32

	params, logStd, value port
	states                []port
	gacts                 numeric   // the graph's own actions output; nil when not used
	gactsRow              int       // its elements per row
	acts                  []float32 // gacts as float32, all rows
	logStdShared          bool

	// scratch, allocated once
	act   []int32   // the categorical head's actions, one per env
	zeros []float32 // episode starts of a bootstrap evaluation: none
}

// port is an output the head reads: the session's buffer (src), and the rows of every call
// (dst: src itself when one call covers all rows or the output does not follow the batch).
type port struct {
	src, dst []float32
	row      int
	batched  bool
}

func (p *port) gather(r0, k int) {
	if p.src == nil || !p.batched || &p.src[0] == &p.dst[0] {
		return
	}
	copy(p.dst[r0*p.row:(r0+k)*p.row], p.src[:k*p.row])
}

// numeric is a session buffer of any element type, read and written as float64.
type numeric interface {
	get(i int) float64
	set(i int, v float64)
}

type typed[T onnx.Element] []T

func (b typed[T]) get(i int) float64    { return float64(b[i]) }
func (b typed[T]) set(i int, v float64) { b[i] = T(v) }

func numericBuf(s *onnx.Session, i int, output bool) (numeric, error) {
	infos := s.Inputs()
	if output {
		infos = s.Outputs()
	}
	get := func(d onnx.DType) (numeric, error) {
		switch d {
		case onnx.Float32:
			return buf[float32](s, i, output)
		case onnx.Float64:
			return buf[float64](s, i, output)
		case onnx.Int32:
			return buf[int32](s, i, output)
		case onnx.Int64:
			return buf[int64](s, i, output)
		case onnx.Uint8:
			return buf[uint8](s, i, output)
		}
		return nil, fmt.Errorf("%w: %s holds %s", ErrPolicy, infos[i], d)
	}
	return get(infos[i].DType)
}

func buf[T onnx.Element](s *onnx.Session, i int, output bool) (numeric, error) {
	var b []T
	var err error
	if output {
		b, err = onnx.Output[T](s, i)
	} else {
		b, err = onnx.Input[T](s, i)
	}
	return typed[T](b), err
}

// newRunner opens p's session for n rows and binds its buffers.
func newRunner(ctx context.Context, p *Policy, n int, rngs []*rand.Rand, deterministic bool) (*Runner, error) {
	sc := p.cfg.Session
	sc.MaxBatch = n
	sc.Weights = p.pub.names()
	s, err := onnx.NewSession(ctx, p.model, sc)
	if err != nil {
		return nil, err
	}
	a := &Runner{sess: s, spec: p.spec, outs: p.outs, fd: p.feeds, scaled: p.binding.ActionsScaled, rngs: rngs,
		deterministic: deterministic, version: p.version, chunk: n, fixed: s.StaticBatch(),
		act: make([]int32, n), zeros: make([]float32, n)}
	if a.fixed {
		a.chunk = s.MaxBatch()
	}
	if p.pub != nil {
		if a.fed, err = newFed(s, p.pub); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	if err := a.bind(n); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return a, nil
}

// bind takes the session's buffers and sets the constant inputs (seq_lens ones, zeros).
func (a *Runner) bind(n int) error {
	s, fd := a.sess, a.fd
	ins, outs := s.Inputs(), s.Outputs()
	a.obsRow = ins[fd.obs].RowSize()
	var err error
	if ins[fd.obs].DType == onnx.Float32 {
		if a.obs, err = onnx.Input[float32](s, fd.obs); err != nil {
			return err
		}
	} else if a.obsAny, err = numericBuf(s, fd.obs, false); err != nil {
		return err
	}
	if fd.seqLens >= 0 {
		lens, err := numericBuf(s, fd.seqLens, false)
		if err != nil {
			return err
		}
		for i := range a.chunk {
			lens.set(i, 1) // every step is a sequence of one
		}
	}
	if fd.starts >= 0 {
		if a.starts, err = numericBuf(s, fd.starts, false); err != nil {
			return err
		}
	}
	// fd.zeros: the session's buffers start zeroed and nothing writes them.
	out := func(i int) (port, error) {
		src, err := onnx.Output[float32](s, i)
		if err != nil {
			return port{}, err
		}
		p := port{src: src, dst: src, row: outs[i].RowSize(), batched: outs[i].Batched}
		if a.fixed && p.batched && a.chunk < n {
			p.dst = make([]float32, n*p.row)
		}
		return p, nil
	}
	if a.outs.Params >= 0 {
		if a.params, err = out(a.outs.Params); err != nil {
			return err
		}
	}
	if a.outs.LogStd >= 0 && !a.outs.Split {
		if a.logStd, err = out(a.outs.LogStd); err != nil {
			return err
		}
		if a.logStdShared, err = head.LogStdLayout(HeadTensor(outs[a.outs.LogStd]), a.spec.ActionDim()); err != nil {
			return fmt.Errorf("%w: %v", ErrPolicy, err)
		}
		if a.logStdShared {
			a.logStd.batched = false
			a.logStd.dst = a.logStd.src[:a.spec.ActionDim()]
		}
	}
	if a.outs.Value >= 0 {
		if a.value, err = out(a.outs.Value); err != nil {
			return err
		}
	}
	if a.outs.Actions >= 0 && (a.outs.DeterministicOnly || a.outs.Params < 0) {
		if a.gacts, err = numericBuf(s, a.outs.Actions, true); err != nil {
			return err
		}
		a.gactsRow = outs[a.outs.Actions].RowSize()
		a.acts = make([]float32, n*a.gactsRow)
	}
	a.stIn = make([][]float32, len(fd.states))
	a.states = make([]port, len(fd.states))
	for k, st := range fd.states {
		if a.stIn[k], err = onnx.Input[float32](s, st.in); err != nil {
			return err
		}
		if a.states[k], err = out(st.out); err != nil {
			return err
		}
	}
	return nil
}

// Version is the policy version of the weights the session reads: the Policy's, then the
// latest staged set's once TakeWeights installed it.
func (a *Runner) Version() int64 { return a.version }

// Close releases the session.
func (a *Runner) Close() error { return a.sess.Close() }

// InferenceTime is the time spent in ONNX Runtime since the Runner was made, with the waits
// for the turn SetTurn gave.
func (a *Runner) InferenceTime() time.Duration { return a.inference }

// SetTurn makes every ONNX Runtime call of the Runner hold turn for the call's duration, and
// only for it: the rows' copies in and out and the sampling stay outside. Runners that share
// one turn then run their sessions one at a time, whatever the goroutines that step them do
// meanwhile (batcher.Config.Pipeline: the two halves of one worker's envs). Nil: no turn. Set
// it before the first Run, on the Runner's goroutine.
func (a *Runner) SetTurn(turn sync.Locker) { a.turn = turn }

// Provider is the execution provider the session got (after any fallback of "auto").
func (a *Runner) Provider() onnx.Provider { return a.sess.Provider() }

// Run runs the policy on n rows without sampling: observations, recurrent states (one row per
// env, batch first; nil for a feed-forward policy) and episode starts (nil: none). Until the
// next Run, Step or Values, Output, LogProb, Value and NextState read what it computed: what a
// check or a replay of recorded rows needs. It allocates nothing.
func (a *Runner) Run(n int, obs []float32, state [][]float32, starts []float32) error {
	od := a.obsRow
	for r0 := 0; r0 < n; r0 += a.chunk {
		k := min(a.chunk, n-r0)
		batch := k
		if a.fixed {
			batch = a.chunk // rows k.. keep whatever the last call left: their outputs are not read
		}
		if a.obs != nil {
			copy(a.obs[:k*od], obs[r0*od:(r0+k)*od])
		} else {
			for j, v := range obs[r0*od : (r0+k)*od] {
				a.obsAny.set(j, float64(v))
			}
		}
		for j, st := range a.fd.states {
			copy(a.stIn[j][:k*st.size], state[j][r0*st.size:(r0+k)*st.size])
		}
		if a.starts != nil {
			for i := range k {
				v := 0.0
				if starts != nil {
					v = float64(starts[r0+i])
				}
				a.starts.set(i, v)
			}
		}
		start := time.Now()
		if a.turn != nil {
			a.turn.Lock()
		}
		err := a.sess.Run(batch)
		a.inference += time.Since(start)
		if a.turn != nil {
			a.turn.Unlock()
		}
		if err != nil {
			return err
		}
		a.params.gather(r0, k)
		a.logStd.gather(r0, k)
		a.value.gather(r0, k)
		for j := range a.states {
			a.states[j].gather(r0, k)
		}
		if a.gacts != nil {
			for j := range k * a.gactsRow {
				a.acts[r0*a.gactsRow+j] = float32(a.gacts.get(j))
			}
		}
	}
	return nil
}

// Values evaluates the state value of n rows (observations, recurrent states in the session's
// batch-first layout, episode starts; nil starts: none) into dst[:n], without drawing random
// numbers; zeros for a policy without a value output.
func (a *Runner) Values(obs []float32, state [][]float32, starts []float32, n int, dst []float32) error {
	if a.value.src == nil {
		clear(dst[:n])
		return nil
	}
	if starts == nil {
		starts = a.zeros
	}
	if err := a.Run(n, obs, state, starts); err != nil {
		return err
	}
	copy(dst[:n], a.value.dst[:n])
	return nil
}

// Step runs one step of n rows: it runs the policy on the observations obs, the recurrent
// states state (one row per env, batch first; nil for a feed-forward policy) and the episode
// starts starts (nil: none), samples the head into acts, envActs and logp (what each holds:
// batcher.Rollout), and writes the value (zeros without one) and the next recurrent states
// into stateOut. It allocates nothing.
func (a *Runner) Step(n int, obs []float32, state [][]float32, starts []float32,
	acts, envActs, logp, value []float32, stateOut [][]float32) error {
	if err := a.Run(n, obs[:n*a.obsRow], state, starts); err != nil {
		return err
	}
	if err := a.sample(n, acts, envActs, logp); err != nil {
		return err
	}
	for k, st := range a.fd.states {
		copy(stateOut[k][:n*st.size], a.states[k].dst[:n*st.size])
	}
	if a.value.src != nil {
		copy(value[:n], a.value.dst[:n])
	} else {
		clear(value[:n])
	}
	return nil
}

// atanhLimit keeps atanh finite for actions at ±1.
const atanhLimit = 1 - 1e-6

// sample turns the outputs of n rows into actions (see Rollout for what each buffer holds).
// The head works all n rows in one call, row i drawing from env i's stream; only RLlib's
// split layout (each row's mean then log_std) goes row by row.
func (a *Runner) sample(n int, acts, envActs, logp []float32) error {
	d := a.spec.ActionDim()
	if a.gacts != nil { // no logits or mean, or no distribution: the graph's own actions
		return a.graphActions(n, acts, envActs, logp)
	}
	switch a.spec.Head {
	case head.CategoricalKind:
		c, act := head.Categorical{N: a.spec.N}, a.act[:n]
		var err error
		if a.deterministic {
			err = c.Mode(a.params.dst[:n*d], act, logp[:n])
		} else {
			err = a.sampleCategorical(c, n, act, logp[:n])
		}
		if err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		for i, k := range act {
			acts[i], envActs[i] = float32(k), float32(k)
		}
		return nil
	case head.QValuesKind:
		eps := a.spec.Epsilon
		if a.hasExplore {
			eps = a.explore
		}
		q, act := head.QValues{N: a.spec.N, Epsilon: eps}, a.act[:n]
		var err error
		if a.deterministic {
			err = q.Mode(a.params.dst[:n*d], act, logp[:n])
		} else {
			err = q.SampleRows(a.rngs[:n], a.params.dst[:n*d], act, logp[:n])
		}
		if err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		for i, k := range act {
			acts[i], envActs[i] = float32(k), float32(k)
		}
		return nil
	case head.GaussianKind, head.TanhGaussianKind:
	default:
		return fmt.Errorf("%w: head %s", ErrPolicy, a.spec.Head)
	}
	g := head.Gaussian{Low: a.spec.Low, High: a.spec.High}
	tanh := a.spec.Head == head.TanhGaussianKind
	raw, env := acts[:n*d], envActs[:n*d]
	clipped := env
	if tanh {
		clipped = nil
	}
	switch {
	case a.outs.DeterministicOnly: // a mean without a log_std
		copy(raw, a.params.dst[:n*d])
		clear(logp[:n])
		if clipped != nil {
			for i := range n {
				clip(raw[i*d:(i+1)*d], clipped[i*d:(i+1)*d], a.spec.Low, a.spec.High)
			}
		}
	case a.outs.Split: // rows of 2·D: the mean, then the log_std
		for i := range n {
			mean, ls := a.params.dst[i*2*d:i*2*d+d], a.logStdRow(i, d)
			r, c := raw[i*d:(i+1)*d], []float32(nil)
			if clipped != nil {
				c = clipped[i*d : (i+1)*d]
			}
			var err error
			if a.deterministic {
				err = g.Mode(mean, ls, r, c, logp[i:i+1])
			} else {
				err = g.SampleRows(a.rngs[i:i+1], mean, ls, r, c, logp[i:i+1])
			}
			if err != nil {
				return fmt.Errorf("bind: env %d: %w", i, err)
			}
		}
	default:
		ls := a.logStd.dst
		if !a.logStdShared {
			ls = ls[:n*d]
		}
		var err error
		if a.deterministic {
			err = g.Mode(a.params.dst[:n*d], ls, raw, clipped, logp[:n])
		} else {
			err = g.SampleRows(a.rngs[:n], a.params.dst[:n*d], ls, raw, clipped, logp[:n])
		}
		if err != nil {
			return fmt.Errorf("bind: %w", err)
		}
	}
	if tanh && a.hasExplore && a.explore > 0 && !a.deterministic {
		a.uniform(n, d, raw, logp)
	}
	if tanh {
		for k, u := range raw {
			env[k] = float32(math.Tanh(float64(u)))
		}
		tg := head.TanhGaussian{Low: a.spec.Low, High: a.spec.High, Scale: a.spec.Scale}
		if err := tg.ToEnv(env, env); err != nil {
			return err
		}
	}
	return nil
}

// sampleCategorical samples n rows of the categorical head c into act and logp, row i with
// env i's stream: from its source directly when the Runner has them (rand.Rand.Float64's
// number, the same bits).
func (a *Runner) sampleCategorical(c head.Categorical, n int, act []int32, logp []float32) error {
	d := a.spec.ActionDim()
	if a.pcgs == nil {
		return c.SampleRows(a.rngs[:n], a.params.dst[:n*d], act, logp)
	}
	u := a.u[:n]
	for i, src := range a.pcgs[:n] {
		u[i] = float64(src.Uint64()<<11>>11) / (1 << 53)
	}
	return c.SampleUniform(u, a.params.dst[:n*d], act, logp)
}

// uniform replaces, with probability a.explore, row i's tanh-gaussian sample by an action
// drawn uniformly from [−1, 1]^d (env i's stream: one number to choose, unless the rate is 1,
// then d): raw gets its u = atanh(a), logp the log-density of that u, Σ log((1 − a²)/2).
func (a *Runner) uniform(n, d int, raw, logp []float32) {
	for i := range n {
		rng := a.rngs[i]
		if a.explore < 1 && rng.Float64() >= a.explore {
			continue
		}
		lp := 0.0
		for j := range d {
			x := min(max(2*rng.Float64()-1, -atanhLimit), atanhLimit)
			raw[i*d+j] = float32(math.Atanh(x))
			lp += math.Log((1 - x*x) / 2)
		}
		logp[i] = float32(lp)
	}
}

// logStdRow is row i's log_std: shared, per row, or the second half of a Split row.
func (a *Runner) logStdRow(i, d int) []float32 {
	switch {
	case a.outs.Split:
		return a.params.dst[i*2*d+d : (i+1)*2*d]
	case a.logStd.src == nil:
		return nil
	case a.logStdShared:
		return a.logStd.dst
	}
	return a.logStd.dst[i*d : (i+1)*d]
}

// graphActions acts with the graph's own deterministic actions (a DeterministicOnly policy
// that has them); log-probabilities are 0.
func (a *Runner) graphActions(n int, acts, envActs, logp []float32) error {
	clear(logp[:n])
	if a.spec.Head.Discrete() {
		for i := range n {
			k := a.acts[i]
			if k < 0 || int(k) >= a.spec.N || k != float32(math.Trunc(float64(k))) {
				return fmt.Errorf("%w: env %d: the policy's action %v is not one of the %d actions", ErrPolicy, i, k, a.spec.N)
			}
			acts[i], envActs[i] = k, k
		}
		return nil
	}
	d := a.spec.ActionDim()
	tg := head.TanhGaussian{Low: a.spec.Low, High: a.spec.High, Scale: a.spec.Scale}
	for i := range n {
		g, raw, env := a.acts[i*d:(i+1)*d], acts[i*d:(i+1)*d], envActs[i*d:(i+1)*d]
		switch {
		case a.spec.Head != head.TanhGaussianKind:
			copy(raw, g)
			clip(raw, env, a.spec.Low, a.spec.High)
			continue
		case a.scaled: // in env units: raw is the pre-tanh value they came from
			clip(g, env, a.spec.Low, a.spec.High)
			if err := tg.FromEnv(env, raw); err != nil {
				return err
			}
		default: // tanh's [−1, 1]
			copy(raw, g)
			if err := tg.ToEnv(g, env); err != nil {
				return err
			}
		}
		for j, x := range raw {
			raw[j] = float32(math.Atanh(min(max(float64(x), -atanhLimit), atanhLimit)))
		}
	}
	return nil
}

func clip(x, dst, lo, hi []float32) {
	for j, v := range x {
		dst[j] = min(max(v, lo[j]), hi[j])
	}
}

// Outputs describes the session's outputs, in the order Output takes them.
func (a *Runner) Outputs() []onnx.TensorInfo { return a.sess.Outputs() }

// Output is float32 output i of the last call's last batch, as the session holds it: rows
// 0..k of a fixed-batch policy's last chunk, every row otherwise. It is the session's buffer:
// read it before the next call, and do not modify it.
func (a *Runner) Output(i int) ([]float32, error) { return onnx.Output[float32](a.sess, i) }

// Value is row i's value from the last Run; 0 for a policy without a value output.
func (a *Runner) Value(i int) float32 {
	if a.value.src == nil {
		return 0
	}
	return a.value.dst[i]
}

// Params is the head's parameters of every row from the last Run (logits, a Gaussian's mean, or
// RLlib's mean then log_std); nil when the policy has none (it acts with its graph's actions).
func (a *Runner) Params() []float32 { return a.params.dst }

// NextState is recurrent state k as the last Run left it, every row (batch first).
func (a *Runner) NextState(k int) []float32 { return a.states[k].dst }

// LogProb is the log-probability of action, a row of Rollout.Actions (the category, or the
// Gaussian draw u before any tanh), under row i's distribution from the last Run; 0 for a
// DeterministicOnly policy. It allocates: it is for checks, not for the step.
func (a *Runner) LogProb(i int, action []float32) float64 {
	if a.outs.DeterministicOnly || a.params.src == nil {
		return 0
	}
	if a.spec.Head == head.QValuesKind {
		q, lp := head.QValues{N: a.spec.N, Epsilon: a.spec.Epsilon}, make([]float32, 1)
		if err := q.LogProb(a.params.dst[i*q.N:(i+1)*q.N], []int32{int32(action[0])}, lp); err != nil {
			return math.NaN()
		}
		return float64(lp[0])
	}
	if a.spec.Head == head.CategoricalKind {
		c := a.spec.N
		lp, _ := head.CategoricalForward(a.params.dst[i*c:(i+1)*c], int(action[0]), make([]float64, c), make([]float64, c))
		return lp
	}
	d := a.spec.ActionDim()
	mean := a.params.dst[i*d : (i+1)*d]
	if a.outs.Split {
		mean = a.params.dst[i*2*d : i*2*d+d]
	}
	return head.GaussianLogProb(action, mean, a.logStdRow(i, d))
}
