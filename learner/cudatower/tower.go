package cudatower

import (
	"errors"
	"fmt"
	"strings"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// ErrArch is wrapped by the error for an architecture the tower does not run.
var ErrArch = errors.New("cudatower: architecture not supported")

// ptr is a device address.
type ptr uint64

// add is p advanced by n float32s.
func (p ptr) add(n int) ptr { return p + ptr(4*n) }

// Activation codes, as the kernels take them.
const (
	actNone = 0
	actTanh = 1
	actReLU = 2
)

// backend is what the tower needs of a GPU: memory, copies, cuBLAS's column-major product
// C = op(A)·op(B) + beta·C (alpha 1) and the two element-wise kernels.
type backend interface {
	alloc(n int) (ptr, error)
	free(p ptr) error
	upload(dst ptr, src []float32) error
	download(dst []float32, src ptr) error
	fill(dst ptr, n int, v float32) error
	gemm(transA, transB bool, m, n, k int, a ptr, lda int, b ptr, ldb int, beta float32, c ptr, ldc int) error
	// biasAct sets y[r, j] = act(y[r, j] + b[j]) over a row-major [rows, cols] y.
	biasAct(y, b ptr, rows, cols, act int) error
	// actGrad multiplies dz[i] by the activation's derivative at its output y[i].
	actGrad(dz, y ptr, n, act int) error
	// close releases what the backend itself holds (not the memory from alloc).
	close() error
}

// layer is one dense layer, y = act(x·W + b), W [in, out] row-major at offset w of the flat
// parameters, b [out] at offset b; y is its output on the device, [rows, out].
type layer struct {
	name    string
	w, b    int
	in, out int
	act     int
	y       ptr
}

// arch is an MLP's layers: the trunk (empty for separate trunks), the policy path (ending in
// the logits or the Gaussian mean) and the value path (ending in the value), each from the
// trunk's output or the observations; logStd is the offset of actor_logstd, or −1.
type arch struct {
	obs                  int
	trunk, policy, value []layer
	logStd, actions      int
	spec                 head.Spec
}

// archOf reads params' layers from their names and shapes (the layout package models
// documents) and checks that they chain.
func archOf(params *models.Params) (arch, error) {
	cfg := params.Config()
	a := arch{logStd: -1, spec: cfg.Spec, actions: cfg.Spec.ActionDim(), obs: 1}
	if cfg.Arch != models.MLP {
		return a, fmt.Errorf("%w: %s (the CUDA tower runs MLPs; train a %s on the CPU towers)", ErrArch, cfg.Arch, cfg.Arch)
	}
	for _, d := range cfg.Spec.ObsShape {
		a.obs *= d
	}
	act := actTanh
	if cfg.Activation == models.ReLU {
		act = actReLU
	}
	names := params.Names()
	for i := 0; i < len(names); i++ {
		name, shape := names[i], params.Shape(i)
		if name == "actor_logstd" {
			a.logStd = params.Offset(i)
			continue
		}
		base, ok := strings.CutSuffix(name, ".weight")
		if !ok || len(shape) != 2 || i+1 >= len(names) || names[i+1] != base+".bias" {
			return a, fmt.Errorf("%w: parameter %q %v is not a linear layer's weight followed by its bias", ErrArch, name, shape)
		}
		l := layer{name: base, w: params.Offset(i), b: params.Offset(i + 1), in: shape[0], out: shape[1], act: act}
		i++
		switch prefix, _, _ := strings.Cut(base, "."); prefix {
		case "network":
			a.trunk = append(a.trunk, l)
		case "actor", "actor_mean":
			a.policy = append(a.policy, l)
		case "critic":
			a.value = append(a.value, l)
		default:
			return a, fmt.Errorf("%w: layer %q belongs to no known path", ErrArch, base)
		}
	}
	if len(a.policy) == 0 || len(a.value) == 0 {
		return a, fmt.Errorf("%w: no policy or value layers", ErrArch)
	}
	a.policy[len(a.policy)-1].act = actNone
	a.value[len(a.value)-1].act = actNone
	in := a.obs
	for i, l := range a.trunk {
		if l.in != in {
			return a, fmt.Errorf("%w: layer %d (%s) takes %d inputs, gets %d", ErrArch, i, l.name, l.in, in)
		}
		in = l.out
	}
	for _, p := range [][]layer{a.policy, a.value} {
		x := in
		for _, l := range p {
			if l.in != x {
				return a, fmt.Errorf("%w: layer %s takes %d inputs, gets %d", ErrArch, l.name, l.in, x)
			}
			x = l.out
		}
	}
	if out := a.policy[len(a.policy)-1].out; out != a.actions {
		return a, fmt.Errorf("%w: the policy path ends in %d outputs for %d actions", ErrArch, out, a.actions)
	}
	if a.value[len(a.value)-1].out != 1 {
		return a, fmt.Errorf("%w: the value path ends in %d outputs", ErrArch, a.value[len(a.value)-1].out)
	}
	return a, nil
}

// lossGraph is the algorithm's loss over the heads' outputs on a gorgonia graph of its own,
// differentiated with respect to them: what runs on the CPU.
type lossGraph struct {
	heads, value, logStd []float32 // inputs: [rows×actions], [rows], [actions] (Gaussian)
	dHeads, dValue, dStd G.Value   // their gradients, read after each run
	loss                 algo.Loss
	m                    G.VM
}

func newLossGraph(a arch, rows int, alg algo.Algorithm) (l *lossGraph, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cudatower: building the %s loss: %v", alg.Name(), r)
		}
	}()
	g := G.NewGraph()
	l = &lossGraph{heads: make([]float32, rows*a.actions), value: make([]float32, rows)}
	input := func(name string, data []float32, shape ...int) *G.Node {
		v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
		return G.NewMatrix(g, tensor.Float32, G.WithShape(shape...), G.WithName(name), G.WithValue(v))
	}
	hn := input("heads", l.heads, rows, a.actions)
	vn := input("value", l.value, rows, 1)
	h := algo.Heads{Spec: a.spec, Rows: rows, Params: hn, Value: vn}
	wrt := []*G.Node{hn, vn}
	if a.logStd >= 0 {
		// As models builds it: the [1, d] parameter broadcast over the rows.
		l.logStd = make([]float32, a.actions)
		ls := input("actor_logstd", l.logStd, 1, a.actions)
		zeros := input("log_std.zeros", make([]float32, rows*a.actions), rows, a.actions)
		if h.LogStd, err = G.BroadcastAdd(zeros, ls, nil, []byte{0}); err != nil {
			return nil, fmt.Errorf("cudatower: log_std: %w", err)
		}
		wrt = append(wrt, ls)
	}
	if l.loss, err = alg.Loss(h); err != nil {
		return nil, err
	}
	gs, err := G.Grad(l.loss.Node(), wrt...)
	if err != nil {
		return nil, fmt.Errorf("cudatower: differentiating the %s loss: %w", alg.Name(), err)
	}
	G.Read(gs[0], &l.dHeads)
	G.Read(gs[1], &l.dValue)
	if len(gs) > 2 {
		G.Read(gs[2], &l.dStd)
	}
	l.m = G.NewTapeMachine(g)
	return l, nil
}

// run runs the loss and its gradient once; gorgonia's panics become errors.
func (l *lossGraph) run() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cudatower: running the loss: %v", r)
		}
	}()
	defer l.m.Reset()
	return l.m.RunAll()
}

// floats is v's float32 values, n of them.
func floats(v G.Value, n int, what string) ([]float32, error) {
	d, ok := v.(*tensor.Dense)
	if !ok || d.Dtype() != tensor.Float32 {
		return nil, fmt.Errorf("cudatower: the gradient of the %s is %T, not a float32 tensor", what, v)
	}
	if d.RequiresIterator() {
		d = d.Materialize().(*tensor.Dense)
	}
	f := d.Float32s()
	if len(f) != n {
		return nil, fmt.Errorf("cudatower: the gradient of the %s has %d values, want %d", what, len(f), n)
	}
	return f, nil
}

// tower is a learner.Tower on a backend.
type tower struct {
	be    backend
	a     arch
	rows  int
	flat  []float32 // the shared parameters, read in place
	names []string
	loss  *lossGraph

	params, grads, obs, ones ptr // on the device: [P], [P], [rows×obs], [rows]
	dHeads, dValue, dTrunk   ptr // the loss's gradients and, with a trunk, the trunk output's
	scratch                  [2]ptr
	allocs                   []ptr

	// lossTime is the time spent in the loss on the CPU (with its copies), summed over Grads.
	lossTime time.Duration
}

// newTower builds a tower of rows rows of alg's loss over params on be. It owns be.
func newTower(be backend, params *models.Params, flat []float32, rows int, alg algo.Algorithm) (t *tower, err error) {
	if rows < 1 {
		return nil, errors.Join(fmt.Errorf("cudatower: a tower of %d rows", rows), be.close())
	}
	if len(flat) != params.Size() || &flat[0] != &params.Data()[0] {
		return nil, errors.Join(errors.New("cudatower: towers must read the model's own parameter vector"), be.close())
	}
	a, err := archOf(params)
	if err != nil {
		return nil, errors.Join(err, be.close())
	}
	t = &tower{be: be, a: a, rows: rows, flat: flat, names: alg.StatNames()}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()
	if t.loss, err = newLossGraph(a, rows, alg); err != nil {
		return nil, err
	}
	alloc := func(n int) ptr {
		if err != nil {
			return 0
		}
		var p ptr
		if p, err = be.alloc(n); err == nil {
			t.allocs = append(t.allocs, p)
		}
		return p
	}
	widest := a.obs
	for _, p := range [][]layer{a.trunk, a.policy, a.value} {
		for i := range p {
			p[i].y = alloc(rows * p[i].out)
			widest = max(widest, p[i].out)
		}
	}
	t.params, t.grads = alloc(len(flat)), alloc(len(flat))
	t.obs, t.ones = alloc(rows*a.obs), alloc(rows)
	t.dHeads, t.dValue = alloc(rows*a.actions), alloc(rows)
	t.scratch = [2]ptr{alloc(rows * widest), alloc(rows * widest)}
	if len(a.trunk) > 0 {
		t.dTrunk = alloc(rows * a.trunk[len(a.trunk)-1].out)
	}
	if err != nil {
		return nil, fmt.Errorf("cudatower: allocating the tower's GPU memory: %w", err)
	}
	if err = be.fill(t.ones, rows, 1); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *tower) StatNames() []string { return t.names }

// Close frees the tower's GPU memory and its backend. It is idempotent.
func (t *tower) Close() error {
	var errs []error
	for _, p := range t.allocs {
		errs = append(errs, t.be.free(p))
	}
	t.allocs = nil
	if t.be != nil {
		errs = append(errs, t.be.close())
		t.be = nil
	}
	return errors.Join(errs...)
}

// forward runs the layers of p from x (with xCols columns) and returns the last output.
func (t *tower) forward(p []layer, x ptr) (ptr, error) {
	for _, l := range p {
		if err := t.be.gemm(false, false, l.out, t.rows, l.in, t.params.add(l.w), l.out, x, l.in, 0, l.y, l.out); err != nil {
			return 0, fmt.Errorf("cudatower: %s forward: %w", l.name, err)
		}
		if err := t.be.biasAct(l.y, t.params.add(l.b), t.rows, l.out, l.act); err != nil {
			return 0, fmt.Errorf("cudatower: %s forward: %w", l.name, err)
		}
		x = l.y
	}
	return x, nil
}

// backward runs p's layers backwards from dy, the gradient of the loss with respect to the
// last layer's output (overwritten), given x0, the first layer's input. It writes each
// layer's weight and bias gradients into the gradient buffer and, when dIn is not 0, the
// gradient with respect to x0 into dIn (added to beta·dIn).
func (t *tower) backward(p []layer, x0, dy, dIn ptr, beta float32) error {
	r := t.rows
	for i := len(p) - 1; i >= 0; i-- {
		l := p[i]
		x := x0
		if i > 0 {
			x = p[i-1].y
		}
		err := func() error {
			if l.act != actNone {
				if err := t.be.actGrad(dy, l.y, r*l.out, l.act); err != nil {
					return err
				}
			}
			// dW [in, out] = xᵀ·dy: column-major dWᵀ [out, in] = dyᵀ [out, r] · x [r, in].
			if err := t.be.gemm(false, true, l.out, l.in, r, dy, l.out, x, l.in, 0, t.grads.add(l.w), l.out); err != nil {
				return err
			}
			// db [out] = 1ᵀ·dy: column-major [out, 1] = dyᵀ [out, r] · 1 [r, 1].
			if err := t.be.gemm(false, false, l.out, 1, r, dy, l.out, t.ones, r, 0, t.grads.add(l.b), l.out); err != nil {
				return err
			}
			// dx [r, in] = dy·Wᵀ: column-major dxᵀ [in, r] = W [in, out] · dyᵀ [out, r].
			dst, b := dIn, beta
			if i > 0 {
				dst, b = t.scratch[0], 0
				if dy == t.scratch[0] {
					dst = t.scratch[1]
				}
			}
			if dst != 0 {
				if err := t.be.gemm(true, false, l.in, r, l.out, t.params.add(l.w), l.out, dy, l.out, b, dst, l.in); err != nil {
					return err
				}
				dy = dst
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("cudatower: %s backward: %w", l.name, err)
		}
	}
	return nil
}

// Grad computes the loss's gradient over mb's rows (exactly the tower's size).
func (t *tower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	a := &t.a
	switch n := mb.Len(); {
	case t.be == nil:
		return errors.New("cudatower: Grad on a closed tower")
	case n != t.rows:
		return fmt.Errorf("cudatower: a tower of %d rows got %d", t.rows, n)
	case mb.ObsDim != a.obs:
		return fmt.Errorf("cudatower: the batch has %d observation values per row, the model %d", mb.ObsDim, a.obs)
	case a.spec.Head != head.CategoricalKind && mb.ActDim != a.actions:
		return fmt.Errorf("cudatower: the batch has %d action values per row, the %s head %d", mb.ActDim, a.spec.Head, a.actions)
	case len(grads) != len(t.flat):
		return fmt.Errorf("cudatower: a gradient buffer of %d values for %d parameters", len(grads), len(t.flat))
	}
	be := t.be
	if err := be.upload(t.params, t.flat); err != nil {
		return fmt.Errorf("cudatower: copying the parameters: %w", err)
	}
	if err := be.upload(t.obs, mb.Obs[:t.rows*a.obs]); err != nil {
		return fmt.Errorf("cudatower: copying the observations: %w", err)
	}
	x, err := t.forward(a.trunk, t.obs)
	if err != nil {
		return err
	}
	heads, err := t.forward(a.policy, x)
	if err != nil {
		return err
	}
	value, err := t.forward(a.value, x)
	if err != nil {
		return err
	}
	start := time.Now()
	l := t.loss
	if err := be.download(l.heads, heads); err != nil {
		return fmt.Errorf("cudatower: copying the heads' outputs: %w", err)
	}
	if err := be.download(l.value, value); err != nil {
		return fmt.Errorf("cudatower: copying the values: %w", err)
	}
	if a.logStd >= 0 {
		copy(l.logStd, t.flat[a.logStd:a.logStd+a.actions])
	}
	if err := l.loss.Fill(mb, nil); err != nil {
		return err
	}
	if err := l.run(); err != nil {
		return err
	}
	dh, err := floats(l.dHeads, len(l.heads), "heads")
	if err != nil {
		return err
	}
	dv, err := floats(l.dValue, len(l.value), "values")
	if err != nil {
		return err
	}
	var dStd []float32
	if a.logStd >= 0 {
		if dStd, err = floats(l.dStd, a.actions, "log std"); err != nil {
			return err
		}
	}
	if err := be.upload(t.dHeads, dh); err != nil {
		return fmt.Errorf("cudatower: copying the heads' gradient: %w", err)
	}
	if err := be.upload(t.dValue, dv); err != nil {
		return fmt.Errorf("cudatower: copying the values' gradient: %w", err)
	}
	t.lossTime += time.Since(start)
	if len(a.trunk) == 0 {
		if err := t.backward(a.policy, t.obs, t.dHeads, 0, 0); err != nil {
			return err
		}
		if err := t.backward(a.value, t.obs, t.dValue, 0, 0); err != nil {
			return err
		}
	} else {
		if err := t.backward(a.policy, x, t.dHeads, t.dTrunk, 0); err != nil {
			return err
		}
		if err := t.backward(a.value, x, t.dValue, t.dTrunk, 1); err != nil {
			return err
		}
		if err := t.backward(a.trunk, t.obs, t.dTrunk, 0, 0); err != nil {
			return err
		}
	}
	if err := be.download(grads, t.grads); err != nil {
		return fmt.Errorf("cudatower: copying the gradient: %w", err)
	}
	if a.logStd >= 0 {
		copy(grads[a.logStd:], dStd)
	}
	l.loss.Stats(stats)
	return nil
}
