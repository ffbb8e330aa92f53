package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/towerrl/towerrl/models/head"
)

// Arch names a policy architecture.
type Arch string

const (
	// MLP is a multi-layer perceptron over flat (or flattened) observations.
	MLP Arch = "mlp"
	// NatureCNN is the DQN Nature convolutional trunk (Mnih et al. 2015) over NCHW images
	// holding 0..255: x/255 → conv 32 8×8 s4 → ReLU → conv 64 4×4 s2 → ReLU → conv 64 3×3 s1
	// → ReLU → flatten → linear (Hidden, default 512) → ReLU, with the heads on top.
	NatureCNN Arch = "nature_cnn"
)

// Activation names a hidden-layer non-linearity.
type Activation string

const (
	Tanh Activation = "tanh" // hyperbolic tangent (CleanRL's MLP agents)
	ReLU Activation = "relu" // rectified linear unit (the Nature CNN)
)

// Config describes a policy architecture. The zero value plus a Spec is a CleanRL-style
// actor-critic MLP: separate 64×64 tanh trunks for the actor and the critic.
type Config struct {
	// Spec names the head (categorical or gaussian), the action space and the observation
	// shape (required: Spec.ObsShape). It is also the source of the exported towerrl.*
	// metadata.
	Spec head.Spec
	// Arch is the trunk: MLP (default) or NatureCNN.
	Arch Arch
	// Hidden are the widths of the hidden linear layers. MLP default {64, 64}; for NatureCNN
	// they are the linear layers after the flatten, default {512}.
	Hidden []int
	// Activation of the hidden linear layers: Tanh (MLP default) or ReLU (NatureCNN default;
	// its convolutions always use ReLU).
	Activation Activation
	// Shared makes the actor and critic heads share one MLP trunk ("network.*"). The default,
	// false, gives each its own trunk as CleanRL's MLP agents do. NatureCNN always shares its
	// trunk and ignores this field.
	Shared bool
	// LogStdInit is the initial value of every entry of the Gaussian head's state-independent
	// log standard deviation ("actor_logstd"); default 0. Ignored by categorical heads.
	LogStdInit float32
}

// withDefaults validates c and fills in the documented defaults. Errors wrap ErrConfig and name
// the field.
func (c Config) withDefaults() (Config, error) {
	if err := c.Spec.Validate(); err != nil {
		return c, fmt.Errorf("%w: Spec: %w", ErrConfig, err)
	}
	c.Spec.ObsShape = slices.Clone(c.Spec.ObsShape)
	c.Spec.Low, c.Spec.High = slices.Clone(c.Spec.Low), slices.Clone(c.Spec.High)
	c.Hidden = slices.Clone(c.Hidden)
	if len(c.Spec.ObsShape) == 0 {
		return c, fmt.Errorf("%w: Spec.ObsShape is empty; the architecture needs the observation shape", ErrConfig)
	}
	for i, d := range c.Spec.ObsShape {
		if d < 1 {
			return c, fmt.Errorf("%w: Spec.ObsShape[%d] is %d; dimensions must be positive", ErrConfig, i, d)
		}
	}
	if c.Arch == "" {
		c.Arch = MLP
	}
	switch c.Arch {
	case MLP:
		if len(c.Hidden) == 0 {
			c.Hidden = []int{64, 64}
		}
		if c.Activation == "" {
			c.Activation = Tanh
		}
	case NatureCNN:
		if len(c.Hidden) == 0 {
			c.Hidden = []int{512}
		}
		if c.Activation == "" {
			c.Activation = ReLU
		}
		c.Shared = true
		if len(c.Spec.ObsShape) != 3 {
			return c, fmt.Errorf("%w: Spec.ObsShape is %v; NatureCNN needs [channels, height, width]", ErrConfig, c.Spec.ObsShape)
		}
		h, w := cnnOut(c.Spec.ObsShape[1]), cnnOut(c.Spec.ObsShape[2])
		if h < 1 || w < 1 {
			return c, fmt.Errorf("%w: Spec.ObsShape is %v; NatureCNN needs images of at least 36×36", ErrConfig, c.Spec.ObsShape)
		}
	default:
		return c, fmt.Errorf("%w: Arch %q; choose %q or %q", ErrConfig, string(c.Arch), MLP, NatureCNN)
	}
	for i, w := range c.Hidden {
		if w < 1 {
			return c, fmt.Errorf("%w: Hidden[%d] is %d; widths must be positive", ErrConfig, i, w)
		}
	}
	if c.Activation != Tanh && c.Activation != ReLU {
		return c, fmt.Errorf("%w: Activation %q; choose %q or %q", ErrConfig, string(c.Activation), Tanh, ReLU)
	}
	if math.IsNaN(float64(c.LogStdInit)) || math.IsInf(float64(c.LogStdInit), 0) {
		return c, fmt.Errorf("%w: LogStdInit is %g", ErrConfig, c.LogStdInit)
	}
	return c, nil
}

// The Nature CNN's convolutions: output channels, kernel, stride.
var natureConvs = [3]struct{ out, k, s int }{{32, 8, 4}, {64, 4, 2}, {64, 3, 1}}

// cnnOut is the spatial size after the three Nature convolutions (no padding).
func cnnOut(n int) int {
	for _, c := range natureConvs {
		if n < c.k {
			return 0
		}
		n = (n-c.k)/c.s + 1
	}
	return n
}

// Layer kinds of the architecture description shared by Build and Export.
type opKind int

const (
	opScale   opKind = iota // x / 255
	opFlatten               // [B, ...] → [B, prod]
	opLinear                // x·W + b, W stored [in, out]
	opConv                  // NCHW convolution, W [out, in, k, k], no padding
	opAct                   // activation
)

// op is one layer of a path. Linear and conv layers own the parameters name+".weight" and
// name+".bias".
type op struct {
	kind    opKind
	name    string
	in, out int // linear: features; conv: channels
	k, s    int // conv kernel and stride
	act     Activation
	gain    float64 // orthogonal init gain of the weight
}

// arch is a Config lowered to three paths: the trunk (may be empty), then the policy path and
// the value path, each starting from the trunk's output.
type arch struct {
	cfg    Config
	trunk  []op
	policy []op // ends in the logits or the Gaussian mean
	value  []op // ends in the value [B, 1]
	logStd bool // a Gaussian head: parameter "actor_logstd" of shape [1, d]
}

const (
	gainHidden = math.Sqrt2
	gainPolicy = 0.01
	gainValue  = 1.0
)

func lower(c Config) arch {
	a := arch{cfg: c, logStd: c.Spec.Head == head.GaussianKind}
	actor := "actor"
	if a.logStd {
		actor = "actor_mean"
	}
	obsSize := 1
	for _, d := range c.Spec.ObsShape {
		obsSize *= d
	}
	mlp := func(prefix string, in int, out int, outGain float64) []op {
		var ops []op
		if len(c.Spec.ObsShape) > 1 {
			ops = append(ops, op{kind: opFlatten})
		}
		for _, w := range c.Hidden {
			ops = append(ops, op{kind: opLinear, name: fmt.Sprintf("%s.%d", prefix, len(ops)), in: in, out: w, gain: gainHidden},
				op{kind: opAct, act: c.Activation})
			in = w
		}
		return append(ops, op{kind: opLinear, name: fmt.Sprintf("%s.%d", prefix, len(ops)), in: in, out: out, gain: outGain})
	}
	d := c.Spec.ActionDim()
	switch {
	case c.Arch == NatureCNN:
		ch, h, w := c.Spec.ObsShape[0], c.Spec.ObsShape[1], c.Spec.ObsShape[2]
		a.trunk = []op{{kind: opScale}}
		for _, cv := range natureConvs {
			a.trunk = append(a.trunk,
				op{kind: opConv, name: fmt.Sprintf("network.%d", len(a.trunk)-1), in: ch, out: cv.out, k: cv.k, s: cv.s, gain: gainHidden},
				op{kind: opAct, act: ReLU})
			ch, h, w = cv.out, (h-cv.k)/cv.s+1, (w-cv.k)/cv.s+1
		}
		a.trunk = append(a.trunk, op{kind: opFlatten})
		in := ch * h * w
		for _, width := range c.Hidden {
			a.trunk = append(a.trunk,
				op{kind: opLinear, name: fmt.Sprintf("network.%d", len(a.trunk)-1), in: in, out: width, gain: gainHidden},
				op{kind: opAct, act: c.Activation})
			in = width
		}
		a.policy = []op{{kind: opLinear, name: actor, in: in, out: d, gain: gainPolicy}}
		a.value = []op{{kind: opLinear, name: "critic", in: in, out: 1, gain: gainValue}}
	case c.Shared:
		trunk := mlp("network", obsSize, 0, 0)
		a.trunk = trunk[:len(trunk)-1] // drop the output layer mlp appended
		in := obsSize
		if n := len(c.Hidden); n > 0 {
			in = c.Hidden[n-1]
		}
		a.policy = []op{{kind: opLinear, name: actor, in: in, out: d, gain: gainPolicy}}
		a.value = []op{{kind: opLinear, name: "critic", in: in, out: 1, gain: gainValue}}
	default:
		a.policy = mlp(actor, obsSize, d, gainPolicy)
		a.value = mlp("critic", obsSize, 1, gainValue)
	}
	return a
}

// paramSpec is one named parameter of an architecture.
type paramSpec struct {
	name  string
	shape []int
	init  func(dst []float32, rng *rand.Rand) // nil: zeros
}

// params lists the architecture's parameters in state_dict order (CleanRL's module order:
// trunk, critic, actor, actor_logstd for MLP agents; network, actor, critic for the CNN).
func (a arch) params() []paramSpec {
	var out []paramSpec
	add := func(ops []op) {
		for _, o := range ops {
			switch o.kind {
			case opLinear:
				gain, in, outF := o.gain, o.in, o.out
				out = append(out,
					paramSpec{name: o.name + ".weight", shape: []int{o.in, o.out}, init: func(dst []float32, rng *rand.Rand) {
						orthogonal(dst, outF, in, gain, rng, true)
					}},
					paramSpec{name: o.name + ".bias", shape: []int{o.out}})
			case opConv:
				gain, rows, cols := o.gain, o.out, o.in*o.k*o.k
				out = append(out,
					paramSpec{name: o.name + ".weight", shape: []int{o.out, o.in, o.k, o.k}, init: func(dst []float32, rng *rand.Rand) {
						orthogonal(dst, rows, cols, gain, rng, false)
					}},
					paramSpec{name: o.name + ".bias", shape: []int{o.out}})
			}
		}
	}
	add(a.trunk)
	if a.cfg.Arch == NatureCNN {
		add(a.policy)
		add(a.value)
	} else {
		add(a.value)
		add(a.policy)
	}
	if a.logStd {
		v := a.cfg.LogStdInit
		out = append(out, paramSpec{name: "actor_logstd", shape: []int{1, a.cfg.Spec.ActionDim()}, init: func(dst []float32, _ *rand.Rand) {
			for i := range dst {
				dst[i] = v
			}
		}})
	}
	return out
}
