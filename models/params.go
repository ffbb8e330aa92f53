package models

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"gorgonia.org/tensor"
)

// Params holds one architecture's parameters: named float32 tensors laid out back to back in
// one flat slice (Data), in Names order. Graphs built over a Params read that memory directly
// (each graph gets its own tensor headers over it), so an in-place update of Data — an
// optimiser step, a checkpoint restore, an averaged-gradient apply — is seen by every graph
// on its next run, with no copies.
//
// Params does no locking: writers (the optimiser) and the graphs' runs must not overlap.
type Params struct {
	arch   arch
	names  []string
	shapes [][]int
	offs   []int // offs[i] is where parameter i starts in data; offs[len] == len(data)
	index  map[string]int
	data   []float32
}

// NewParams validates cfg and allocates its parameters, initialised as CleanRL does:
// orthogonal weights (gain √2 for hidden layers and convolutions, 0.01 for the policy output,
// 1 for the value output), zero biases, and the Gaussian log_std set to cfg.LogStdInit. rng
// drives the initialisation and is required; the same seed gives the same parameters.
func NewParams(cfg Config, rng *rand.Rand) (*Params, error) {
	if rng == nil {
		return nil, fmt.Errorf("%w: NewParams needs a *rand.Rand for the initialisation; got nil", ErrConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := lower(c)
	specs := a.params()
	p := &Params{arch: a, index: make(map[string]int, len(specs))}
	n := 0
	for i, s := range specs {
		p.names = append(p.names, s.name)
		p.shapes = append(p.shapes, s.shape)
		p.offs = append(p.offs, n)
		p.index[s.name] = i
		n += product(s.shape)
	}
	p.offs = append(p.offs, n)
	p.data = make([]float32, n)
	for i, s := range specs {
		if s.init != nil {
			s.init(p.data[p.offs[i]:p.offs[i+1]], rng)
		}
	}
	return p, nil
}

// Config is the configuration the parameters were made for, with defaults filled in.
func (p *Params) Config() Config {
	c := p.arch.cfg
	c.Spec.ObsShape = slices.Clone(c.Spec.ObsShape)
	c.Spec.Low, c.Spec.High = slices.Clone(c.Spec.Low), slices.Clone(c.Spec.High)
	c.Hidden = slices.Clone(c.Hidden)
	return c
}

// Names lists the parameter names in layout order (PyTorch state_dict style, e.g.
// "critic.0.weight", "actor.4.bias", "actor_logstd").
func (p *Params) Names() []string { return slices.Clone(p.names) }

// Len is the number of parameter tensors.
func (p *Params) Len() int { return len(p.names) }

// Size is the total number of float32 values, len(Data()).
func (p *Params) Size() int { return len(p.data) }

// Data is the flat parameter memory: parameter i occupies Data()[Offset(i):Offset(i+1)],
// row-major in Shape(i). Writing into it updates every graph built over p.
func (p *Params) Data() []float32 { return p.data }

// Offset is where parameter i starts in Data; Offset(Len()) is Size().
func (p *Params) Offset(i int) int { return p.offs[i] }

// Shape is parameter i's shape. Linear weights are [in, out] (the transpose of PyTorch's
// [out, in]); convolution weights [out, in, kh, kw]; biases [out]; actor_logstd [1, d].
func (p *Params) Shape(i int) []int { return slices.Clone(p.shapes[i]) }

// Tensor returns the named parameter's values (a slice of Data, not a copy) and shape.
func (p *Params) Tensor(name string) (data []float32, shape []int, ok bool) {
	i, ok := p.index[name]
	if !ok {
		return nil, nil, false
	}
	return p.data[p.offs[i]:p.offs[i+1]], slices.Clone(p.shapes[i]), true
}

// Clone returns a deep copy: the same architecture and values in new memory.
func (p *Params) Clone() *Params {
	q := *p
	q.data = slices.Clone(p.data)
	return &q
}

// view is a new tensor header over parameter name's memory with the given shape (the
// parameter's own shape when none is given). Each graph gets its own headers, so gorgonia
// never shares a *tensor.Dense (whose metadata it mutates) between graphs.
func (p *Params) view(name string, shape ...int) *tensor.Dense {
	i := p.index[name]
	if len(shape) == 0 {
		shape = p.shapes[i]
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(p.data[p.offs[i]:p.offs[i+1]]))
}

func product(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
