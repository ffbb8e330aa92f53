package models

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/models/head"
)

// Policy is one architecture built into one gorgonia graph for a fixed batch size, reading
// its parameters from a shared Params. It owns its graph, its input buffers and (after
// Compile) its tape machine, and belongs to one goroutine at a time.
//
// The exported nodes are the forward outputs the learner's loss is built from; the graph may
// be extended with more nodes (LogProb, Entropy, Input, any gorgonia op) until Compile.
type Policy struct {
	// Graph is the gorgonia graph the policy was built into.
	Graph *G.ExprGraph
	// Obs is the observation input, [batch, obs_shape...]; write it through ObsData.
	Obs *G.Node
	// Logits are the categorical head's unnormalised log-probabilities, [batch, n]; nil for a
	// Gaussian head.
	Logits *G.Node
	// Mean and LogStd are the Gaussian head's mean and log standard deviation, [batch, d] each
	// (LogStd is the state-independent parameter broadcast over the batch); nil for a
	// categorical head.
	Mean, LogStd *G.Node
	// Value is the critic's state value, [batch, 1].
	Value *G.Node
	// Params are the parameter nodes, in the layout order of the Params the policy reads.
	Params G.Nodes

	params  *Params
	spec    head.Spec
	batch   int
	obs     []float32
	action  *G.Node // categorical: one-hot [batch, n]; Gaussian: [batch, d]
	actData []float32
	logp    *G.Node
	logSM   *G.Node
	watched map[*G.Node]*G.Value // nodes copied out by Read nodes, for Read
	reads   map[*G.Node]*G.Value // the Read statement nodes Watch added, and what they fill
	entropy *G.Node
	grads   bool // Backward was called
	// gradNodes are the parameters' gradient nodes (Backward), in Params order. At Compile,
	// those of this package's ops that nothing reads write straight into gradBuf (direct[i]);
	// the others (bound) are accumulated by the tape machine into the parameters' dual values.
	gradNodes G.Nodes
	gradBuf   []float32
	direct    []bool
	bound     G.Nodes
	ran       bool // the last Run succeeded: the gradients are this run's
	// reference: built from gorgonia's own ops, not the fused ones (tests only; see build)
	reference bool
	vm        *tape.Machine // the tape machine running the graph, when plan cannot
	plan      *plan         // runs the graph (see exec.go), or nil
	tapeOnly  bool          // run on the tape machine even where a plan could (tests)
	unfused   bool          // Backward makes ActGrad ops, no GemmActGrad ones (tests)
	closed    bool
}

// Build adds params' architecture to g for a fixed batch size and returns its nodes. The
// parameter nodes read params' memory in place (see Params), so any number of policies, each in
// its own graph, can be built over one Params. g must be a fresh graph owned by the caller.
func Build(g *G.ExprGraph, params *Params, batch int) (p *Policy, err error) {
	return build(g, params, batch, false)
}

// build is Build; reference builds the layers from gorgonia's own ops (matrix product,
// broadcast add, activation, log softmax) instead of this package's fused ones, for tests.
func build(g *G.ExprGraph, params *Params, batch int, reference bool) (p *Policy, err error) {
	if g == nil || params == nil {
		return nil, fmt.Errorf("%w: Build needs a graph and parameters", ErrConfig)
	}
	if batch < 1 {
		return nil, fmt.Errorf("%w: batch is %d; it must be positive", ErrConfig, batch)
	}
	graphMu.Lock()
	defer graphMu.Unlock()
	defer guard(&err, "building the policy graph")
	a := params.arch
	p = &Policy{Graph: g, params: params, spec: a.cfg.Spec, batch: batch, reference: reference}
	nodes := make(map[string]*G.Node, params.Len())
	for i, name := range params.names {
		shape := params.shapes[i]
		v := params.view(name)
		if len(shape) == 1 { // a bias: shaped for broadcasting against its layer's output
			if isConvBias(a.trunk, name) {
				v = params.view(name, 1, shape[0], 1, 1)
			} else {
				v = params.view(name, 1, shape[0])
			}
		}
		n := G.NewTensor(g, tensor.Float32, v.Dims(), G.WithShape(v.Shape()...), G.WithName(name), G.WithValue(v))
		nodes[name] = n
		p.Params = append(p.Params, n)
	}

	obsShape := append([]int{batch}, a.cfg.Spec.ObsShape...)
	p.obs = make([]float32, product(obsShape))
	obsT := tensor.New(tensor.WithShape(obsShape...), tensor.WithBacking(p.obs))
	p.Obs = G.NewTensor(g, tensor.Float32, len(obsShape), G.WithShape(obsShape...), G.WithName("obs"), G.WithValue(obsT))

	x, data, err := p.path(a.trunk, p.Obs, true, nodes)
	if err != nil {
		return nil, err
	}
	out, _, err := p.path(a.policy, x, data, nodes)
	if err != nil {
		return nil, err
	}
	if p.Value, _, err = p.path(a.value, x, data, nodes); err != nil {
		return nil, err
	}
	if !a.logStd {
		p.Logits = out
	} else {
		p.Mean = out
		d := a.cfg.Spec.ActionDim()
		zeros := G.NewMatrix(g, tensor.Float32, G.WithShape(batch, d), G.WithName("log_std.zeros"),
			G.WithValue(tensor.New(tensor.WithShape(batch, d), tensor.Of(tensor.Float32))))
		if p.LogStd, err = G.BroadcastAdd(zeros, nodes["actor_logstd"], nil, []byte{0}); err != nil {
			return nil, fmt.Errorf("%w: log_std: %w", ErrGraph, err)
		}
	}
	for _, n := range []*G.Node{p.Logits, p.Mean, p.LogStd, p.Value} {
		if n != nil {
			if err := p.watch(n); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func isConvBias(ops []op, name string) bool {
	for _, o := range ops {
		if o.kind == opConv && o.name+".bias" == name {
			return true
		}
	}
	return false
}

// path applies ops to x. data says x is the observations or a rescaling or reshaping of them
// (no gradient is made for data); so does the returned flag for the path's output. A linear
// layer followed by its activation becomes one fused Linear op (see linear.go).
func (p *Policy) path(ops []op, x *G.Node, data bool, nodes map[string]*G.Node) (*G.Node, bool, error) {
	var err error
	for i := 0; i < len(ops); i++ {
		o := ops[i]
		switch o.kind {
		case opScale:
			x, err = G.HadamardDiv(x, G.NewConstant(float32(255), G.WithName("255")))
		case opFlatten:
			s := x.Shape()
			x, err = G.Reshape(x, tensor.Shape{s[0], product(s[1:])})
		case opLinear:
			if p.reference {
				if x, err = G.Mul(x, nodes[o.name+".weight"]); err == nil {
					x, err = G.BroadcastAdd(x, nodes[o.name+".bias"], nil, []byte{0})
				}
				break
			}
			var act Activation
			if i+1 < len(ops) && ops[i+1].kind == opAct {
				act = ops[i+1].act
				i++
			}
			x, err = linear(x, nodes[o.name+".weight"], nodes[o.name+".bias"], act, data)
			data = false
		case opConv:
			w := nodes[o.name+".weight"]
			if x, err = G.Conv2d(x, w, tensor.Shape{o.k, o.k}, []int{0, 0}, []int{o.s, o.s}, []int{1, 1}); err == nil {
				x, err = G.BroadcastAdd(x, nodes[o.name+".bias"], nil, []byte{0, 2, 3})
			}
			data = false
		case opAct:
			if o.act == Tanh {
				x, err = G.Tanh(x)
			} else {
				x, err = G.Rectify(x)
			}
		}
		if err != nil {
			return nil, false, fmt.Errorf("%w: layer %q: %w", ErrGraph, o.name, err)
		}
	}
	return x, data, nil
}
