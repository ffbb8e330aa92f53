package learner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/internal/spin"
)

// Tower computes gradients on its slice of each minibatch. A tower is built for a fixed
// number of rows (sequences, for recurrent data) and belongs to one goroutine; it reads the
// shared parameters in place and must not write them.
type Tower interface {
	// Grad computes the gradient of the mean loss over mb's rows, writes it into grads (one
	// value per parameter, in the flat parameter order), and writes its statistics
	// (StatNames order) into stats.
	Grad(mb *SampleBatch, grads []float32, stats []float64) error
	// StatNames names the statistics Grad reports; every tower of a set reports the same.
	StatNames() []string
	Close() error
}

// ColumnTower is a Tower whose Grad reads only the columns of its slice that Columns names:
// the towers gather only those of a shuffled minibatch's rows into its slice (its other
// columns hold what earlier minibatches left there).
type ColumnTower interface {
	Tower
	Columns() Columns
}

// ColumnsOf is what tw reads of its slice: its Columns when it is a ColumnTower, else every
// column.
func ColumnsOf(tw Tower) Columns {
	if ct, ok := tw.(ColumnTower); ok {
		return ct.Columns()
	}
	return AllColumns
}

// TowerFactory builds tower i on dev for slices of rows rows (sequences, for recurrent
// data), reading the shared flat parameter vector params.
type TowerFactory func(i int, dev device.Device, rows int, params []float32) (Tower, error)

// TowersConfig configures a set of towers. The zero value is one CPU tower.
type TowersConfig struct {
	// N is the number of towers. Default: len(Devices), or 1.
	N int
	// Devices places tower i on Devices[i]. Default: the CPU for every tower.
	Devices []device.Device
	// Minibatch is the number of rows (sequences for recurrent data) of each minibatch; it
	// is truncated to a multiple of N. Required.
	Minibatch int
	// MaxGradNorm clips the averaged gradient's global L2 norm. Default 0: no clipping.
	MaxGradNorm float64
	// NormalizeAdvantages standardises the advantages of each minibatch (over the whole
	// minibatch, before it is split, so that N towers compute the same update as one).
	NormalizeAdvantages bool
	// Collective averages the towers' gradients. Default: an in-process Local group. With a
	// *Local, each tower averages only the shard of the gradient it applies (a reduce-scatter,
	// with the bits AllReduce gives).
	Collective Collective
	// NoSpin makes the towers' waits for each other (and the default Local's) park at once
	// instead of spinning briefly first: no CPU burns while a tower waits, at the cost of a
	// thread wake-up per hand-off (tens of µs on a VM). For machines shared with other work,
	// and to measure without spinning. Default false: spin when every tower can have a CPU.
	NoSpin bool
	// Crew runs towers 1..N-1 on its goroutines (N must be its size) instead of goroutines of
	// the Towers' own, for several Towers that update in turn (SAC's critics, then its actor):
	// each set's own goroutines would spin for up to 500 µs after its step while the next
	// set's step runs, keeping that set's goroutines, just woken, off the CPUs as long.
	// Closing the Towers leaves the Crew to its maker. Default nil: goroutines of their own.
	Crew *Crew
}

// Crew is the goroutines that run towers 1..n-1 of every Towers given it in TowersConfig.Crew
// (tower 0 runs on the goroutine calling Update). Those Towers' updates must not overlap, nor
// overlap Run. A Crew belongs to its maker, whose Close stops it.
type Crew struct {
	n    int
	pool *spin.Pool
	work func(i int) // the job of the Run in progress
}

// NewCrew starts the goroutines of a crew of n ≥ 1 (none for n = 1). With noSpin they park at
// once between jobs (TowersConfig.NoSpin); else they spin first when GOMAXPROCS leaves each of
// the n a P.
func NewCrew(n int, noSpin bool) *Crew {
	c := &Crew{n: max(n, 1)}
	c.pool = spin.NewPool(max(n, 1), func(i int) { c.work(i) }, spin.WithMode(spin.ModeFor(noSpin)))
	return c
}

// N is the crew's size: the goroutine calling Run and the crew's own.
func (c *Crew) N() int { return c.n }

// Run calls work(i) for each i in [0, N) in parallel, work(0) on the calling goroutine, and
// returns when all have returned. Everything written before Run is visible to work, and
// everything work writes is visible after Run. Between updates, Run splits other work over
// the towers' goroutines (SAC's target averaging).
func (c *Crew) Run(work func(i int)) {
	c.work = work
	c.pool.Run()
	c.work = nil
}

// Close stops the crew's goroutines. Idempotent; not concurrent with Run or an update.
func (c *Crew) Close() error { return c.pool.Close() }

// Towers splits each minibatch evenly over N towers, computes their gradients in parallel,
// averages them in tower order through a Collective, clips the result by global norm and
// applies it once through the optimiser to the one shared parameter vector. With more than
// one tower and an [Adam] or [SGD] optimiser, the towers share the work after the gradients:
// tower i sums the squares of its shard of the average (whole blocks of 512 values), and once
// all have, clips and steps that shard; the results are the bits of one serial step, for any
// number of towers. Update calls must not overlap; Weights may be called concurrently with
// Update.
type Towers struct {
	cfg    TowersConfig
	towers []Tower
	per    int // rows (or sequences) per tower
	params []float32
	opt    Optimizer
	coll   Collective
	grads  [][]float32
	stats  [][]float64
	slices []*SampleBatch
	cols   []Columns // the columns tower i reads (ColumnTower)
	names  []string

	mu      sync.RWMutex // guards params against Weights reading during opt.Step, and version
	version int64

	crew    *Crew       // runs tower i's job on goroutine i (tower 0 on Update's)
	ownCrew bool        // the crew is the Towers' own, closed with them
	job     func(i int) // tower i's job: its error into errs[i]
	jobs    []towerJob  // per tower: this update's slice, written by Update before the crew runs
	errs    []error     // per tower: its job's error, read by Update after the crew has run
	avg     []float64   // averaged statistics, returned in UpdateStats
	adv     []float32   // a shuffled minibatch's advantages, gathered here (UpdateRows)
	advStd  advScale    // their standardisation, which each tower applies to its share (UpdateRows)
	sums    []float64   // square sums of the averaged gradient's normBlocks (tower i writes its shard's)

	// With more than one tower and an optimiser that can step in ranges, each tower also takes
	// its shard of the norm, the clipping and the step (see compute); else Update does them.
	stepper rangeStepper
	local   *Local        // the collective, when it is a Local: the towers average their shards only
	failed  []bool        // per tower: its gradient or averaging failed in this update
	meet    *spin.Barrier // the towers, between their shards of the norm and of the step
	norm    float64       // this update's gradient norm, written by tower 0
}

// towerJob asks a tower for the gradient of rows [lo, hi) of b (sequences, for recurrent data),
// or, when rows is set, of b's rows rows (a feed-forward batch in a shuffled order).
type towerJob struct {
	ctx    context.Context
	b      *SampleBatch
	lo, hi int
	rows   []int
	adv    []float32 // with rows, under NormalizeAdvantages: the rows' advantages as gathered, not yet standardised (Towers.advStd)
}

// UpdateStats reports one update.
type UpdateStats struct {
	Rows     int           // rows trained (after truncation to a multiple of N)
	GradNorm float64       // global norm of the averaged gradient before clipping
	LR       float64       // learning rate applied
	Stats    []float64     // the towers' statistics averaged, in StatNames order; valid until the next Update
	Grad     time.Duration // from the towers' start to the applied step
}

// NewTowers builds cfg.N towers over params (the shared flat parameter vector, owned by the
// Towers from now on) with layout describing the batches they will take.
func NewTowers(cfg TowersConfig, params []float32, opt Optimizer, layout *SampleBatch, factory TowerFactory) (*Towers, error) {
	if cfg.N == 0 {
		cfg.N = max(len(cfg.Devices), 1)
	}
	switch {
	case cfg.N < 0:
		return nil, fmt.Errorf("%w: N = %d towers", ErrConfig, cfg.N)
	case len(cfg.Devices) != 0 && len(cfg.Devices) != cfg.N:
		return nil, fmt.Errorf("%w: %d Devices for %d towers", ErrConfig, len(cfg.Devices), cfg.N)
	case cfg.Minibatch < 1:
		return nil, fmt.Errorf("%w: Minibatch = %d", ErrConfig, cfg.Minibatch)
	case opt == nil:
		return nil, fmt.Errorf("%w: no optimiser", ErrConfig)
	case cfg.Crew != nil && cfg.Crew.N() != cfg.N:
		return nil, fmt.Errorf("%w: a crew of %d for %d towers", ErrConfig, cfg.Crew.N(), cfg.N)
	}
	per := cfg.Minibatch / cfg.N
	if per == 0 {
		return nil, fmt.Errorf("%w: a minibatch of %d over %d towers leaves a tower nothing", ErrSplit, cfg.Minibatch, cfg.N)
	}
	mode := spin.ModeFor(cfg.NoSpin)
	if cfg.Collective == nil {
		l := NewLocal(cfg.N)
		l.spin = mode.Spins(cfg.N)
		cfg.Collective = l
	}
	if cfg.Collective.Members() != cfg.N {
		return nil, fmt.Errorf("%w: a collective of %d members for %d towers", ErrConfig, cfg.Collective.Members(), cfg.N)
	}
	t := &Towers{cfg: cfg, per: per, params: params, opt: opt, coll: cfg.Collective}
	rowsPer := per
	if layout.Recurrent() {
		rowsPer = layout.Cap() // whole sequences of unknown length: room for any
	}
	for i := range cfg.N {
		dev := device.CPU()
		if len(cfg.Devices) > 0 {
			dev = cfg.Devices[i]
		}
		tw, err := factory(i, dev, per, params)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("learner: tower %d on %s: %w", i, dev, err), t.closeTowers())
		}
		t.towers = append(t.towers, tw)
		t.grads = append(t.grads, make([]float32, len(params)))
		t.slices = append(t.slices, layout.NewLike(rowsPer))
		t.cols = append(t.cols, ColumnsOf(tw))
	}
	t.names = t.towers[0].StatNames()
	for range t.towers {
		t.stats = append(t.stats, make([]float64, len(t.names)))
	}
	t.avg = make([]float64, len(t.names))
	if cfg.NormalizeAdvantages && !layout.Recurrent() {
		t.adv = make([]float32, cfg.Minibatch)
	}
	t.sums = make([]float64, (len(params)+normBlock-1)/normBlock)
	if st, ok := opt.(rangeStepper); ok && cfg.N > 1 {
		if st.size() != len(params) {
			return nil, errors.Join(fmt.Errorf("%w: an optimiser for %d parameters, the model has %d", ErrConfig, st.size(), len(params)), t.closeTowers())
		}
		t.stepper, t.failed, t.meet = st, make([]bool, cfg.N), spin.NewBarrier(cfg.N, mode)
		t.local, _ = cfg.Collective.(*Local)
	}
	// Tower 0 runs on the goroutine calling Update; towers 1..N-1 on the crew's.
	t.jobs, t.errs = make([]towerJob, cfg.N), make([]error, cfg.N)
	t.job = func(i int) { t.errs[i] = t.compute(i, t.jobs[i]) }
	t.crew = cfg.Crew
	if t.crew == nil {
		t.crew, t.ownCrew = NewCrew(cfg.N, cfg.NoSpin), true
	}
	return t, nil
}

// compute copies tower i's slice, computes its gradient and takes part in the averaging; with a
// stepper, it then applies tower i's shard of the step.
func (t *Towers) compute(i int, job towerJob) error {
	var err error
	if job.rows != nil {
		cols := t.cols[i]
		if job.adv != nil {
			// Update gathered the minibatch's advantages (job.adv this tower's share) and
			// worked out their standardisation: the tower applies it to its rows, writes them
			// back to b (the towers' rows are disjoint) and into its slice.
			cols &^= ColAdvantages
		}
		err = t.slices[i].gatherFrom(job.b, job.rows, cols)
		if job.adv != nil {
			dst := t.slices[i].Advantages
			if err != nil || t.cols[i]&ColAdvantages == 0 {
				dst = nil
			}
			t.advStd.apply(job.adv, job.b.Advantages, job.rows, dst)
		}
	} else {
		err = job.b.CopyRange(t.slices[i], job.lo, job.hi)
	}
	if err == nil {
		err = t.towers[i].Grad(t.slices[i], t.grads[i], t.stats[i])
	}
	if err != nil {
		err = fmt.Errorf("learner: tower %d: %w", i, err)
		// Still take part in the round so the others do not wait forever; the error wins.
		clear(t.grads[i])
	}
	switch {
	case t.stepper == nil:
		if rerr := t.coll.AllReduce(job.ctx, i, t.grads[i]); err == nil {
			err = rerr
		}
	case t.local != nil:
		// Only this tower's shard of the mean is needed, with its square sums.
		lo, hi := span(len(t.params), len(t.towers), i)
		if rerr := t.local.meanShard(job.ctx, i, t.grads[i], lo, hi, t.sums); err == nil {
			err = rerr
		}
		t.stepShard(i, err, false)
	default:
		if rerr := t.coll.AllReduce(job.ctx, i, t.grads[i]); err == nil {
			err = rerr
		}
		t.stepShard(i, err, true)
	}
	return err
}

// stepShard is tower i's part of the step, on its shard (span) of its own buffer, where the
// averaged gradient is: the square sums of the shard's blocks (unless meanShard wrote them);
// once all the towers have theirs, the global norm (the same bits on every tower), the
// clipping and the optimiser's step on the shard. Nothing is applied when any tower failed.
// Tower 0 takes the write lock before the towers meet, and Update releases it after they are
// done, so Weights never sees a half-applied step.
func (t *Towers) stepShard(i int, err error, sums bool) {
	lo, hi := span(len(t.params), len(t.towers), i)
	g := t.grads[i]
	t.failed[i] = err != nil
	if err == nil && sums {
		squareSums(g, lo, hi, t.sums)
	}
	if i == 0 {
		t.mu.Lock()
	}
	t.meet.Wait(nil)
	if slices.Contains(t.failed, true) {
		return
	}
	norm := normOf(t.sums)
	if i == 0 {
		t.norm = norm
	}
	t.stepper.stepRange(t.params[lo:hi], g[lo:hi], lo, clipScale(norm, t.cfg.MaxGradNorm))
}

// StatNames names UpdateStats.Stats.
func (t *Towers) StatNames() []string { return t.names }

// N is the number of towers.
func (t *Towers) N() int { return len(t.towers) }

// Params is the shared flat parameter vector. Read it only between updates, or use Weights.
func (t *Towers) Params() []float32 { return t.params }

// Optimizer is the optimiser applying the updates.
func (t *Towers) Optimizer() Optimizer { return t.opt }

// Version counts the updates applied.
func (t *Towers) Version() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.version
}

// Weights copies the parameters into dst (len(dst) must be len(Params())) and returns their
// version. It may run while the towers train: it never sees a half-applied update.
func (t *Towers) Weights(dst []float32) (int64, error) {
	if len(dst) != len(t.params) {
		return 0, fmt.Errorf("%w: Weights into %d values, the model has %d", ErrConfig, len(dst), len(t.params))
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	copy(dst, t.params)
	return t.version, nil
}

// Update trains on rows [lo, hi) of b (sequences, for recurrent data): the range is truncated
// to a multiple of N, split evenly, one slice per tower, and the averaged gradient applied once.
// With NormalizeAdvantages, b's advantages in the range are standardised in place first.
func (t *Towers) Update(ctx context.Context, b *SampleBatch, lo, hi int) (UpdateStats, error) {
	return t.update(ctx, b, nil, lo, hi)
}

// UpdateRows is Update on a feed-forward batch b in the order order (row k of the shuffled
// batch is b's row order[k], a RowOrder's Rows): it trains on what Update trains on rows
// [lo, hi) of b shuffled by Shuffler.Shuffle with that permutation, the same bits, without
// moving b's rows. Each tower gathers its own slice, in parallel, where a Shuffle gathers the
// whole batch on one goroutine and then copies it back. The standardised advantages are
// written back to their rows of b, as Update writes them to its range.
func (t *Towers) UpdateRows(ctx context.Context, b *SampleBatch, order []int, lo, hi int) (UpdateStats, error) {
	if b.Recurrent() {
		return UpdateStats{}, fmt.Errorf("%w: a batch of sequences cannot be trained by rows", ErrBatch)
	}
	if lo < 0 || hi > len(order) || lo > hi {
		return UpdateStats{}, fmt.Errorf("%w: rows [%d, %d) of an order of %d", ErrBatch, lo, hi, len(order))
	}
	return t.update(ctx, b, order, lo, hi)
}

// update is Update, and with order set UpdateRows.
func (t *Towers) update(ctx context.Context, b *SampleBatch, order []int, lo, hi int) (UpdateStats, error) {
	n := len(t.towers)
	units := hi - lo
	per := min(units/n, t.per)
	if per == 0 {
		return UpdateStats{}, fmt.Errorf("%w: %d rows over %d towers leaves a tower nothing", ErrSplit, units, n)
	}
	hi = lo + per*n
	r0, r1 := lo, hi // the rows trained: whole sequences' rows for recurrent data
	if b.Recurrent() {
		r0, r1 = seqRows(b.SeqLens, lo), seqRows(b.SeqLens, hi)
	}
	if t.cfg.NormalizeAdvantages {
		if err := t.standardize(ctx, b, order, r0, r1); err != nil {
			return UpdateStats{}, err
		}
	}
	start := time.Now()
	for i := range n {
		t.jobs[i] = towerJob{ctx: ctx, b: b, lo: lo + i*per, hi: lo + (i+1)*per}
		if order != nil {
			t.jobs[i].rows = order[lo+i*per : lo+(i+1)*per]
			if t.cfg.NormalizeAdvantages {
				t.jobs[i].adv = t.adv[i*per : (i+1)*per]
			}
		}
	}
	lr := t.opt.CurrentLR()
	if t.stepper != nil {
		t.stepper.prepareStep()
	}
	// No ctx here: the towers honour it inside AllReduce, and their buffers must not be reused
	// before they are done with them.
	t.crew.Run(t.job)
	clear(t.jobs) // do not keep the batch
	err := errors.Join(t.errs...)
	var norm float64
	if t.stepper != nil {
		// The towers have applied their shards of the step (or none, after an error) under
		// the lock tower 0 took.
		if err == nil {
			t.stepper.finishStep()
			t.version++
		}
		norm = t.norm
		t.mu.Unlock()
	} else if err == nil {
		squareSums(t.grads[0], 0, len(t.grads[0]), t.sums)
		norm = normOf(t.sums)
		scaleGrads(t.grads[0], clipScale(norm, t.cfg.MaxGradNorm))
		t.mu.Lock()
		if err = t.opt.Step(t.params, t.grads[0]); err == nil {
			t.version++
		}
		t.mu.Unlock()
	}
	if err != nil {
		return UpdateStats{}, err
	}
	grad := time.Since(start)
	clear(t.avg)
	for _, s := range t.stats {
		for k, v := range s {
			t.avg[k] += v / float64(n)
		}
	}
	return UpdateStats{Rows: r1 - r0, GradNorm: norm, LR: lr, Grad: grad, Stats: t.avg}, nil
}

// standardize standardises the advantages of rows [r0, r1) of b in place, or with order set,
// of b's rows order[r0:r1], gathered in that order (the sums run in the order of the shuffled
// rows) and written back.
func (t *Towers) standardize(ctx context.Context, b *SampleBatch, order []int, r0, r1 int) error {
	adv := b.Advantages[r0:r1]
	if order != nil {
		// The towers apply the scale to their shares and write them back (compute), in
		// parallel: here only the serial part, the gather and the sums.
		adv = t.adv[:r1-r0]
		kernels.Gather(adv, b.Advantages, order[r0:r1], 1)
	}
	var sc advScale
	if sr, ok := t.coll.(SumReducer); ok {
		var err error
		if sc, err = scaleAcross(ctx, sr, adv); err != nil {
			return fmt.Errorf("learner: standardising advantages across processes: %w", err)
		}
	} else {
		sc = scaleOf(adv)
	}
	if order != nil {
		t.advStd = sc
		return nil
	}
	sc.apply(adv, nil, nil, adv)
	return nil
}

// seqRows is the row at which sequence k starts.
func seqRows(lens []int32, k int) int {
	r := 0
	for _, l := range lens[:k] {
		r += int(l)
	}
	return r
}

// Standardize standardises x in place: (x − mean)/(std + 1e-8), std with Bessel's correction
// as torch.std, which CleanRL's PPO uses (Towers' NormalizeAdvantages; losses that compute
// their own advantages call it on them).
func Standardize(x []float32) {
	scaleOf(x).apply(x, nil, nil, x)
}

// advScale is a standardisation, (x − mean)/(std + 1e-8); the zero value (fewer than 2
// values) leaves values as they are.
type advScale struct {
	mean, std float64
	ok        bool
}

// scaleOf is Standardize's scale for x: the mean, then the squared deviations from it, in
// float64.
func scaleOf(x []float32) advScale {
	if len(x) < 2 {
		return advScale{}
	}
	sum, m2 := moments(x)
	return advScale{mean: sum / float64(len(x)), std: math.Sqrt(m2 / float64(len(x)-1)), ok: true}
}

// moments is x's sum and its sum of squared deviations from its mean (taken in a second pass),
// in float64; x is not empty.
func moments(x []float32) (sum, m2 float64) {
	for _, v := range x {
		sum += float64(v)
	}
	mean := sum / float64(len(x))
	for _, v := range x {
		m2 += (float64(v) - mean) * (float64(v) - mean)
	}
	return sum, m2
}

// apply writes x standardised into dst (which may be x) unless dst is nil, and into
// back[rows[k]] for each k unless back is nil.
func (s advScale) apply(x, back []float32, rows []int, dst []float32) {
	if dst != nil {
		dst = dst[:len(x)]
	}
	if back != nil {
		rows = rows[:len(x)]
	}
	for k, v := range x {
		if s.ok {
			v = float32((float64(v) - s.mean) / (s.std + 1e-8))
		}
		if dst != nil {
			dst[k] = v
		}
		if back != nil {
			back[rows[k]] = v
		}
	}
}

// scaleAcross is scaleOf over the rows of every process of sr's group: x is this process's
// share. One all-reduce sums each process's row count n_r, sum S_r and Q_r = M2_r + S_r²/n_r,
// where M2_r, its sum of squared deviations from its own mean, is taken in a second local
// pass; then the group's M2 = Q − S²/n. The result is what one process holding every row
// computes, up to the order of the sums and the cancellation in Q − S²/n, which costs about
// log10(mean²/variance) of float64's 16 digits: nothing that matters for advantages (a mean
// 100 standard deviations away still agrees to 1e-6). One call per update instead of two (the
// sum, then the squared deviations from the group's mean): each call costs every process the
// slowest one's wait.
func scaleAcross(ctx context.Context, sr SumReducer, x []float32) (advScale, error) {
	var st [3]float64
	st[0] = float64(len(x))
	if len(x) > 0 {
		st[1], st[2] = moments(x)
		st[2] += st[1] * (st[1] / st[0])
	}
	if err := sr.AllReduceSum(ctx, st[:]); err != nil {
		return advScale{}, err
	}
	if st[0] < 2 {
		return advScale{}, nil
	}
	mean := st[1] / st[0]
	m2 := max(st[2]-st[1]*mean, 0)
	return advScale{mean: mean, std: math.Sqrt(m2 / (st[0] - 1)), ok: true}, nil
}

func (t *Towers) closeTowers() error {
	var errs []error
	for _, tw := range t.towers {
		errs = append(errs, tw.Close())
	}
	return errors.Join(errs...)
}

// Close stops the tower goroutines and closes the towers. Not concurrent with Update.
func (t *Towers) Close() error {
	if t.crew == nil {
		return nil
	}
	var err error
	if t.ownCrew {
		err = t.crew.Close()
	}
	t.crew = nil
	return errors.Join(err, t.closeTowers())
}
