package models

import (
	"errors"
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/models/head"
)

// halfLog2Pi is ½·log(2π), the Gaussian log-density's constant.
var halfLog2Pi = 0.5 * math.Log(2*math.Pi)

// Batch is the fixed batch size the policy was built for.
func (p *Policy) Batch() int { return p.batch }

// Spec is the head and spaces of the policy's architecture.
func (p *Policy) Spec() head.Spec { return p.spec }

// ObsData is the observation input's memory, [batch, obs_shape...] row-major: write the next
// batch here before Run. It stays valid for the policy's life.
func (p *Policy) ObsData() []float32 { return p.obs }

// Input adds a float32 input node of the given shape (batch rows first, as the caller wants)
// for the loss, such as advantages or returns, and returns it with its memory, which the
// caller fills before each Run. Only before Compile.
func (p *Policy) Input(name string, shape ...int) (n *G.Node, data []float32, err error) {
	if p.compiled() {
		return nil, nil, fmt.Errorf("%w: Input %q after Compile", ErrState, name)
	}
	if len(shape) == 0 || product(shape) < 1 {
		return nil, nil, fmt.Errorf("%w: input %q of shape %v", ErrShape, name, shape)
	}
	graphMu.Lock()
	defer graphMu.Unlock()
	defer guard(&err, "adding input "+name)
	data = make([]float32, product(shape))
	t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	return G.NewTensor(p.Graph, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t)), data, nil
}

// actionInput lazily adds the action input: a one-hot [batch, n] for a categorical head, the
// raw actions [batch, d] for a Gaussian head.
func (p *Policy) actionInput() error {
	if p.action != nil {
		return nil
	}
	n, data, err := p.Input("action", p.batch, p.spec.ActionDim())
	if err != nil {
		return err
	}
	p.action, p.actData = n, data
	return nil
}

// LogProb adds (once) and returns the log-probability of the actions set with SetActions or
// SetBoxActions under the current head, shape [batch]. The Gaussian log-density is of the raw
// (unclipped) action. Only before Compile.
func (p *Policy) LogProb() (logp *G.Node, err error) {
	if p.logp != nil {
		return p.logp, nil
	}
	if p.compiled() {
		return nil, fmt.Errorf("%w: LogProb after Compile", ErrState)
	}
	if err := p.actionInput(); err != nil {
		return nil, err
	}
	graphMu.Lock()
	defer graphMu.Unlock()
	defer guard(&err, "adding the log-probability")
	if p.Logits != nil {
		ls := p.logSoftmax()
		p.logp = G.Must(G.Sum(G.Must(G.HadamardProd(ls, p.action)), 1))
		return p.logp, p.watch(p.logp)
	}
	d := float64(p.spec.ActionDim())
	z := G.Must(G.HadamardDiv(G.Must(G.Sub(p.action, p.Mean)), G.Must(G.Exp(p.LogStd))))
	sq := G.Must(G.Sum(G.Must(G.Square(z)), 1))
	half := G.Must(G.HadamardProd(sq, G.NewConstant(float32(-0.5))))
	logp = G.Must(G.Sub(half, G.Must(G.Sum(p.LogStd, 1))))
	p.logp = G.Must(G.Sub(logp, G.NewConstant(float32(d*halfLog2Pi))))
	return p.logp, p.watch(p.logp)
}

// Entropy adds (once) and returns the entropy of the head's distribution for each row, shape
// [batch]. Only before Compile.
func (p *Policy) Entropy() (ent *G.Node, err error) {
	if p.entropy != nil {
		return p.entropy, nil
	}
	if p.compiled() {
		return nil, fmt.Errorf("%w: Entropy after Compile", ErrState)
	}
	graphMu.Lock()
	defer graphMu.Unlock()
	defer guard(&err, "adding the entropy")
	if p.Logits != nil {
		ls := p.logSoftmax()
		// exp(log softmax), not G.SoftMax: gorgonia's op hash ignores softmax-vs-log, so the
		// graph would merge the two nodes into one.
		pr := G.Must(G.Exp(ls))
		p.entropy = G.Must(G.Neg(G.Must(G.Sum(G.Must(G.HadamardProd(pr, ls)), 1))))
		return p.entropy, p.watch(p.entropy)
	}
	d := float64(p.spec.ActionDim())
	p.entropy = G.Must(G.Add(G.Must(G.Sum(p.LogStd, 1)), G.NewConstant(float32(d*(0.5+halfLog2Pi)))))
	return p.entropy, p.watch(p.entropy)
}

// logSoftmax adds (once) log softmax(logits) over the action axis; it panics like G.Must.
func (p *Policy) logSoftmax() *G.Node {
	if p.logSM == nil {
		if p.reference {
			p.logSM = G.Must(G.LogSoftMax(p.Logits, 1))
		} else {
			p.logSM = G.Must(G.ApplyOp(&logSoftmaxOp{}, p.Logits))
		}
	}
	return p.logSM
}

// SetActions writes the categorical actions of the batch (one per row, 0 ≤ a < n) into the
// LogProb input. LogProb must have been called.
func (p *Policy) SetActions(actions []int32) error {
	if p.Logits == nil {
		return fmt.Errorf("%w: SetActions on a %s head; use SetBoxActions", ErrState, p.spec.Head)
	}
	if p.action == nil {
		return fmt.Errorf("%w: SetActions before LogProb", ErrState)
	}
	if len(actions) != p.batch {
		return fmt.Errorf("%w: %d actions for a batch of %d", ErrShape, len(actions), p.batch)
	}
	n := p.spec.N
	clear(p.actData)
	for i, a := range actions {
		if a < 0 || int(a) >= n {
			return fmt.Errorf("%w: action %d of row %d is outside [0, %d)", ErrShape, a, i, n)
		}
		p.actData[i*n+int(a)] = 1
	}
	return nil
}

// SetBoxActions writes the continuous actions of the batch, [batch, d] row-major, into the
// LogProb input. LogProb must have been called.
func (p *Policy) SetBoxActions(actions []float32) error {
	if p.Mean == nil {
		return fmt.Errorf("%w: SetBoxActions on a %s head; use SetActions", ErrState, p.spec.Head)
	}
	if p.action == nil {
		return fmt.Errorf("%w: SetBoxActions before LogProb", ErrState)
	}
	if len(actions) != len(p.actData) {
		return fmt.Errorf("%w: %d action values for a batch of %d×%d", ErrShape, len(actions), p.batch, p.spec.ActionDim())
	}
	copy(p.actData, actions)
	return nil
}

// Backward adds the gradient of the scalar loss with respect to every parameter to the graph;
// after Compile, each Run leaves d loss/d param for Grads to copy out. The loss itself is the
// caller's (engine/). Only before Compile.
func (p *Policy) Backward(loss *G.Node) (err error) {
	if p.compiled() {
		return fmt.Errorf("%w: Backward after Compile", ErrState)
	}
	if p.grads {
		return fmt.Errorf("%w: Backward called twice", ErrState)
	}
	if loss == nil || !loss.IsScalar() {
		return fmt.Errorf("%w: the loss must be a scalar node", ErrShape)
	}
	graphMu.Lock()
	defer graphMu.Unlock()
	defer guard(&err, "differentiating the loss")
	if !p.unfused {
		fuseActGrads(p.Graph)
	}
	gs, err := G.Grad(loss, p.Params...)
	if err != nil {
		return fmt.Errorf("%w: differentiating the loss: %w", ErrGraph, err)
	}
	if len(gs) != len(p.Params) {
		return fmt.Errorf("%w: %d gradients for %d parameters", ErrGraph, len(gs), len(p.Params))
	}
	p.grads, p.gradNodes = true, gs
	return nil
}

// placeGrads decides, once the graph is final (Compile), where each parameter's gradient is
// read from. A gradient computed by one of this package's ops (a weight's product, a bias's
// column sum) of the parameter's shape, which no other node reads and which is no other
// parameter's, is written by that op straight into gradBuf at the parameter's offset: no
// zeroing, no accumulation into a dual value, no copy out of it. gorgonia's register
// allocation gives such a node a register of its own that no later instruction of the run
// writes (registers are shared only with an input an op overwrites, and nothing reads this
// node), so the values stay until the next run. Any other gradient (a parameter used twice,
// whose gradients gorgonia sums; one reduced from a broadcast) is accumulated by the tape
// machine into the parameter's dual value, as before: those parameters are bound.
func (p *Policy) placeGrads() {
	p.gradBuf = make([]float32, p.params.Size())
	p.direct = make([]bool, len(p.Params))
	p.bound = nil
	seen := map[*G.Node]bool{}
	for i, gn := range p.gradNodes {
		w, ok := gn.Op().(writer)
		n := p.params.offs[i+1] - p.params.offs[i]
		if ok && !seen[gn] && gn.Shape().TotalSize() == n && gn.Shape().Eq(p.Params[i].Shape()) &&
			p.Graph.To(gn.ID()).Len() == 0 {
			w.outputOf().writeInto(p.gradBuf[p.params.offs[i]:p.params.offs[i+1]])
			p.direct[i] = true
		} else {
			p.bound = append(p.bound, p.Params[i])
		}
		seen[gn] = true
	}
}

// Compile freezes the graph and makes it runnable: as a plan where it can be, else on
// gorgonia's tape machine (see the package documentation). After it the graph cannot grow.
func (p *Policy) Compile() (err error) {
	if p.closed {
		return fmt.Errorf("%w: Compile after Close", ErrState)
	}
	if p.compiled() {
		return fmt.Errorf("%w: Compile called twice", ErrState)
	}
	graphMu.Lock()
	defer graphMu.Unlock()
	defer guard(&err, "compiling the graph")
	if p.grads {
		p.placeGrads()
	}
	if !p.tapeOnly {
		if p.plan, _ = newPlan(p); p.plan != nil {
			return nil
		}
	}
	var opts []G.VMOpt
	if len(p.bound) > 0 {
		opts = append(opts, G.BindDualValues(p.bound...))
	}
	p.vm = tape.New(p.Graph, opts...)
	return nil
}

// compiled reports whether Compile has run: the graph is frozen.
func (p *Policy) compiled() bool { return p.plan != nil || p.vm != nil }

// Run executes the graph once on the current inputs: the forward outputs, and with Backward
// the parameter gradients of this run (not accumulated across runs).
func (p *Policy) Run() (err error) {
	if !p.compiled() {
		return fmt.Errorf("%w: Run before Compile", ErrState)
	}
	if p.closed {
		return fmt.Errorf("%w: Run after Close", ErrState)
	}
	defer guard(&err, "running the graph")
	p.ran = false
	if p.plan != nil {
		if err := p.plan.run(); err != nil {
			return fmt.Errorf("%w: %w", ErrGraph, err)
		}
		p.ran = true
		return nil
	}
	if p.grads {
		// gorgonia accumulates into the bound parameters' gradients; start each run from zero.
		// (The others are written whole by their ops; see placeGrads.)
		for _, n := range p.bound {
			if g, err := n.Grad(); err == nil {
				if t, ok := g.(tensor.Tensor); ok {
					t.Zero()
				}
			}
		}
	}
	defer p.vm.Reset()
	if err := p.vm.Run(); err != nil {
		return fmt.Errorf("%w: %w", ErrGraph, err)
	}
	p.ran = true
	return nil
}

// Forward copies obs ([batch, obs_shape...] row-major) into the observation input and runs.
func (p *Policy) Forward(obs []float32) error {
	if len(obs) != len(p.obs) {
		return fmt.Errorf("%w: %d observation values for a batch of %d×%v", ErrShape, len(obs), p.batch, p.spec.ObsShape)
	}
	copy(p.obs, obs)
	return p.Run()
}

// Watch makes n readable with Read after each Run. gorgonia's tape machine reuses the memory
// of intermediate values, so a node's own Value may be overwritten later in the same run; a
// watched node's values are copied out when they are computed. The forward outputs and the
// LogProb and Entropy nodes are watched already. Only before Compile.
func (p *Policy) Watch(n *G.Node) error {
	graphMu.Lock()
	defer graphMu.Unlock()
	return p.watch(n)
}

// watch is Watch with graphMu held.
func (p *Policy) watch(n *G.Node) (err error) {
	if p.compiled() {
		return fmt.Errorf("%w: Watch after Compile", ErrState)
	}
	if n == nil {
		return fmt.Errorf("%w: Watch of a nil node", ErrState)
	}
	if _, ok := p.watched[n]; ok {
		return nil
	}
	defer guard(&err, "watching "+n.Name())
	v := new(G.Value)
	r := G.Read(n, v)
	if p.watched == nil {
		p.watched, p.reads = map[*G.Node]*G.Value{}, map[*G.Node]*G.Value{}
	}
	p.watched[n], p.reads[r] = v, v
	return nil
}

// Read returns watched node n's values from the last Run, row-major (one value for a scalar).
// The slice is the policy's copy: valid until the next Run, not to be written.
func (p *Policy) Read(n *G.Node) ([]float32, error) {
	v, ok := p.watched[n]
	if !ok || n == nil {
		return nil, fmt.Errorf("%w: Read of a node that is not watched; call Watch before Compile", ErrState)
	}
	if *v == nil {
		return nil, fmt.Errorf("%w: node %q has no value; Run first", ErrState, n.Name())
	}
	switch d := (*v).Data().(type) {
	case []float32:
		return d, nil
	case float32:
		return []float32{d}, nil
	default:
		return nil, fmt.Errorf("%w: node %q holds %T, not float32", ErrShape, n.Name(), d)
	}
}

// Grads copies the parameter gradients of the last Run into dst, in the layout of the Params
// (dst[params.Offset(i):params.Offset(i+1)] is parameter i's gradient), so towers can average
// them into one flat buffer. len(dst) must be the Params' Size.
func (p *Policy) Grads(dst []float32) error {
	if !p.grads {
		return fmt.Errorf("%w: Grads without Backward", ErrState)
	}
	if len(dst) != p.params.Size() {
		return fmt.Errorf("%w: gradient buffer of %d values, the parameters hold %d", ErrShape, len(dst), p.params.Size())
	}
	if !p.ran {
		return fmt.Errorf("%w: Grads before a successful Run", ErrState)
	}
	if len(p.bound) == 0 || p.plan != nil {
		// The plan copies the bound parameters' gradients into gradBuf too.
		copy(dst, p.gradBuf)
		return nil
	}
	for i, n := range p.Params {
		if p.direct[i] {
			copy(dst[p.params.offs[i]:p.params.offs[i+1]], p.gradBuf[p.params.offs[i]:p.params.offs[i+1]])
			continue
		}
		g, err := n.Grad()
		if err != nil {
			return fmt.Errorf("%w: gradient of %q: run first (%w)", ErrState, n.Name(), err)
		}
		src, ok := g.Data().([]float32)
		if !ok || len(src) != p.params.offs[i+1]-p.params.offs[i] {
			return fmt.Errorf("%w: gradient of %q", ErrShape, n.Name())
		}
		copy(dst[p.params.offs[i]:], src)
	}
	return nil
}

// Close releases the tape machine (a plan holds nothing to release). It is idempotent.
func (p *Policy) Close() (err error) {
	if p.closed {
		return nil
	}
	p.closed = true
	if p.vm == nil {
		return nil
	}
	defer guard(&err, "closing the tape machine")
	return errors.Join(p.vm.Close())
}
