package bind

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// ErrPublish is wrapped by errors about publishing weights in place: a layout
// (Config.Publish) that does not fit the graph, or a Publish that does not fit the
// layout.
var ErrPublish = errors.New("bind: cannot publish the weights")

// publishing is a policy's layout of published weights with the model's values of each. It is
// immutable and shared by the agents made from the policy.
type publishing struct {
	params   []Param
	size     int         // values in the flat vector: the furthest end of params
	defaults [][]float32 // the model's values of each weight, in params order
	// conv names the published weights of convolutions, which run slower fed (see doc.go).
	conv []string
}

// names lists the published initializers in layout order; nil for no layout.
func (p *publishing) names() []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.params))
	for i, q := range p.params {
		out[i] = q.Name
	}
	return out
}

// preparePublish checks a layout against model and makes each published Identity output an
// initializer of its own (see untie). It returns the model sessions are made from (model
// itself when nothing was rewritten) and the layout with the model's values.
func preparePublish(model *onnx.Model, params []Param) (*onnx.Model, *publishing, error) {
	size, err := checkLayout(params)
	if err != nil {
		return nil, nil, err
	}
	g := model.Proto().GetGraph()
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = t
	}
	var edited *onnxpb.ModelProto // the copy untie edits, made at the first name to untie
	for _, p := range params {
		t, ok := inits[p.Name]
		if !ok {
			if edited == nil {
				edited = proto.Clone(model.Proto()).(*onnxpb.ModelProto)
				g = edited.GetGraph()
				clear(inits)
				for _, t := range g.GetInitializer() {
					inits[t.GetName()] = t
				}
			}
			if t, err = untie(g, p.Name, inits); err != nil {
				return nil, nil, err
			}
			inits[p.Name] = t
		}
		n := 1
		for _, d := range t.GetDims() {
			n *= int(d)
		}
		switch {
		case onnxpb.TensorProto_DataType(t.GetDataType()) != onnxpb.TensorProto_FLOAT:
			return nil, nil, fmt.Errorf("%w: initializer %q holds %v; only float32 weights are published", ErrPublish,
				p.Name, onnxpb.TensorProto_DataType(t.GetDataType()))
		case len(t.GetDims()) == 0 || n != p.Len:
			return nil, nil, fmt.Errorf("%w: initializer %q has shape %v (%d values); the layout gives it %d", ErrPublish,
				p.Name, t.GetDims(), n, p.Len)
		}
	}
	if edited != nil {
		if model, err = onnx.FromProto(edited); err != nil {
			return nil, nil, fmt.Errorf("bind: writing the policy with untied weights: %w", err)
		}
	}
	pub := &publishing{params: slices.Clone(params), size: size}
	for _, n := range g.GetNode() {
		if op := n.GetOpType(); (op == "Conv" || op == "ConvTranspose") && len(n.GetInput()) > 1 &&
			slices.ContainsFunc(params, func(p Param) bool { return p.Name == n.GetInput()[1] }) {
			pub.conv = append(pub.conv, n.GetInput()[1])
		}
	}
	if pub.defaults, err = model.WeightValues(pub.names()); err != nil {
		return nil, nil, err
	}
	return model, pub, nil
}

// checkLayout refuses a layout with an empty or repeated name, a negative offset, an empty
// or overlapping range, and returns the flat vector's length: the furthest end.
func checkLayout(params []Param) (int, error) {
	seen := map[string]bool{}
	size := 0
	for i, p := range params {
		switch {
		case p.Name == "":
			return 0, fmt.Errorf("%w: Config.Publish[%d] has no name", ErrPublish, i)
		case seen[p.Name]:
			return 0, fmt.Errorf("%w: Config.Publish names %q twice", ErrPublish, p.Name)
		case p.Offset < 0 || p.Len < 1 || p.Offset > math.MaxInt-p.Len:
			return 0, fmt.Errorf("%w: Config.Publish[%d] (%q) has offset %d and length %d; want an offset ≥ 0 and a length ≥ 1",
				ErrPublish, i, p.Name, p.Offset, p.Len)
		}
		seen[p.Name] = true
		size = max(size, p.Offset+p.Len)
	}
	byOffset := slices.Clone(params)
	slices.SortFunc(byOffset, func(a, b Param) int { return a.Offset - b.Offset })
	for i := 1; i < len(byOffset); i++ {
		if a, b := byOffset[i-1], byOffset[i]; a.Offset+a.Len > b.Offset {
			return 0, fmt.Errorf("%w: Config.Publish gives %q values [%d, %d) and %q values [%d, %d), which overlap",
				ErrPublish, a.Name, a.Offset, a.Offset+a.Len, b.Name, b.Offset, b.Offset+b.Len)
		}
	}
	return size, nil
}

// untie makes name, the output of an Identity node reading a float initializer (PyTorch's
// exporter shares equal initializers that way; onnx/graph trains each such output as a
// parameter of its own), an initializer holding a copy of that value, and drops the node: the
// graph computes the same, and the weight can be fed apart from the one it copied. It returns
// the new initializer.
func untie(g *onnxpb.GraphProto, name string, inits map[string]*onnxpb.TensorProto) (*onnxpb.TensorProto, error) {
	at := slices.IndexFunc(g.GetNode(), func(n *onnxpb.NodeProto) bool { return slices.Contains(n.GetOutput(), name) })
	var src *onnxpb.TensorProto
	if at >= 0 {
		n := g.GetNode()[at]
		if n.GetOpType() == "Identity" && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") && len(n.GetInput()) == 1 {
			src = inits[n.GetInput()[0]]
		}
	}
	if src == nil {
		return nil, fmt.Errorf("%w: Config.Publish names %q, which is neither an initializer of the policy's graph nor an Identity of one; its float initializers are %s",
			ErrPublish, name, initializerNames(g))
	}
	if slices.ContainsFunc(g.GetOutput(), func(v *onnxpb.ValueInfoProto) bool { return v.GetName() == name }) {
		return nil, fmt.Errorf("%w: %q is a graph output made by an Identity of %q; it cannot become a published initializer", ErrPublish, name, src.GetName())
	}
	t := proto.Clone(src).(*onnxpb.TensorProto)
	t.Name = proto.String(name)
	g.Initializer = append(g.Initializer, t)
	g.Node = slices.Delete(g.Node, at, at+1)
	return t, nil
}

// initializerNames lists g's float initializers of rank ≥ 1 for a message (the first 20).
func initializerNames(g *onnxpb.GraphProto) string {
	var names []string
	for _, t := range g.GetInitializer() {
		if onnxpb.TensorProto_DataType(t.GetDataType()) == onnxpb.TensorProto_FLOAT && len(t.GetDims()) > 0 {
			names = append(names, fmt.Sprintf("%q", t.GetName()))
		}
	}
	if len(names) > 20 {
		names = append(names[:20], fmt.Sprintf("and %d more", len(names)-20))
	}
	return strings.Join(names, ", ")
}

// fed is an agent's two sets of buffers for a published policy's weights: the session reads
// the front set while Publish writes the other, and the worker swaps them between two steps.
type fed struct {
	pub  *publishing
	sets [2]*onnx.Weights

	mu      sync.Mutex // guards front, version and the back set's contents
	front   int        // the set the session reads
	version int64      // the version staged in the back set
	// explore is the exploration rate staged with the weights (see Runner.StageExplore), when
	// hasExplore.
	explore    float64
	hasExplore bool
	staged     atomic.Bool
}

// newFed makes the two sets of s's fed weights, both holding the model's values, and uses the
// first.
func newFed(s *onnx.Session, pub *publishing) (*fed, error) {
	f := &fed{pub: pub}
	for i := range f.sets {
		bufs := make([][]float32, len(pub.defaults))
		for k, d := range pub.defaults {
			bufs[k] = slices.Clone(d)
		}
		var err error
		if f.sets[i], err = s.NewWeights(bufs); err != nil {
			return nil, err
		}
	}
	return f, s.UseWeights(f.sets[0])
}

// stage copies flat's weights into the back set, for the worker to take before its next step.
// The session may be running on the front set meanwhile.
func (f *fed) stage(version int64, flat []float32, explore float64, hasExplore bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if hasExplore {
		f.explore, f.hasExplore = explore, true
	}
	back := f.sets[1-f.front].Buffers()
	for i, p := range f.pub.params {
		copy(back[i], flat[p.Offset:p.Offset+p.Len])
	}
	f.version = version
	f.staged.Store(true)
}

// take makes the staged set the one s reads, between two steps (the worker's goroutine), and
// returns its version and the exploration rate staged last (ok false when none was).
func (f *fed) take(s *onnx.Session) (version int64, explore float64, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.front = 1 - f.front
	f.staged.Store(false)
	return f.version, f.explore, f.hasExplore, s.UseWeights(f.sets[f.front])
}

// TakeWeights installs the weights a Stage left, between two steps (the worker's goroutine):
// the Runner's version becomes theirs. Without staged weights it does nothing.
func (a *Runner) TakeWeights() error {
	if a.fed == nil || !a.fed.staged.Load() { // the per-step check, inlined into the worker's loop
		return nil
	}
	return a.takeWeights()
}

// takeWeights is TakeWeights once weights are staged.
func (a *Runner) takeWeights() error {
	v, explore, ok, err := a.fed.take(a.sess)
	if err != nil {
		return err
	}
	a.version = v
	if ok {
		a.explore, a.hasExplore = explore, true
	}
	return nil
}

// Layout is the layout of the weights the Runner's session reads from buffers
// (Config.Publish; shared: do not modify it) and the length of the flat vector it lays out;
// nil and 0 for a policy not published in place.
func (a *Runner) Layout() ([]Param, int) {
	if a.fed == nil {
		return nil, 0
	}
	return a.fed.pub.params, a.fed.pub.size
}

// Stage copies flat, laid out as Layout says, into the set of weight buffers the session does
// not read, as version, for TakeWeights to install before the next step. It may be called from
// any goroutine, while the session runs on the other set. The caller checks flat's length.
func (a *Runner) Stage(version int64, flat []float32) { a.fed.stage(version, flat, 0, false) }

// StageExplore is Stage with an exploration rate ε in [0, 1] that the Runner takes with the
// weights, for an off-policy trainer's schedule: a qvalues head acts ε-greedily with it
// instead of its metadata's towerrl.epsilon, and a tanh-gaussian head takes, with probability
// ε, an action drawn uniformly from the env's bounds instead of its sample (SB3's random
// actions before learning_starts). It stays until the next StageExplore. A deterministic
// Runner ignores it. The caller checks ε.
func (a *Runner) StageExplore(version int64, flat []float32, explore float64) {
	a.fed.stage(version, flat, explore, true)
}
