package policy

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/engine/internal/mlp"
	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Dense is a foreign policy whose acting network is a plain MLP — the observation, dense
// layers (Gemm, or MatMul then Add) with one hidden activation (ReLU or Tanh) between them,
// ending in the tensors the head reads — imported into the native dense network of
// engine/internal/mlp, which the off-policy learners (engine/dqn, engine/sac) train. It
// remembers where each native layer's values live in the graph (the initializers' names and
// whether the weight is stored transposed, as PyTorch's nn.Linear stores it), so WriteBack
// returns the original graph with the trained values: same names, opset, inputs, outputs and
// batch, only the initializers' data changed.
//
// The native network's outputs are the head's: a qvalues head's Q-values; a tanh-gaussian
// head's mean (before tanh) then its log std (before its clip), both read from the last hidden
// layer, as Stable-Baselines3's and CleanRL's SAC actors compute them.
type Dense struct {
	Net    mlp.Net
	Params []float32 // the graph's values in Net's layout (mlp: W [in, out] row-major, then b)
	// Binding is what models/layout recognised.
	Binding layout.Binding
	// LogStdMin and LogStdMax are the bounds a tanh-gaussian graph clips its log std to.
	LogStdMin, LogStdMax float64
	// FreshLogStd: the graph has no log std (an actor exported as its deterministic action
	// only); the native net's log-std columns are new, started at InitLogStd for every
	// observation, and WriteBack writes only the mean's layers.
	FreshLogStd bool
	// Notes say what was imported, for the log.
	Notes []string

	proto *onnxpb.ModelProto
	parts [][]densePart // per native layer, the graph's layers that hold its columns
}

// InitLogStd is the log std a fresh log-std layer starts at (weights 0, bias log 0.2): a
// trained actor wants little noise. SAC starts from scratch with a bias of 0 (σ = 1 before
// tanh), which would spread a trained Pendulum actor's actions over most of the range and
// undo what it knows before the new critics can guide it; σ = 0.2 is near what Stable-Baselines3's
// own SAC Pendulum actor keeps after training (0.23 on the fixture).
var InitLogStd = math.Log(0.2)

// densePart is one graph layer: the initializers holding columns [cols[0], cols[1]) of a
// native layer of in inputs.
type densePart struct {
	weight, bias string
	transB       bool // the weight is stored [out, in] (Gemm transB=1: nn.Linear's layout)
	cols         [2]int
	in           int
}

// ErrNotDense is wrapped by ImportDense's errors about a graph that is not a plain MLP.
var ErrNotDense = fmt.Errorf("%w: not a plain dense network (MLP)", ErrFineTune)

// ImportDense imports data, a foreign ONNX policy, as a plain MLP, bound as the batchers bind
// it with h (the env's head and the user's names and --head): a Q-network (qvalues head) on a
// Discrete space, for DQN; a tanh-squashed Gaussian actor on a Box space, for SAC. A graph of
// another head, or whose head's tensors are not computed by such an MLP from the
// observation, is refused with what was found and what to do.
func ImportDense(data []byte, h Head) (*Dense, error) {
	spec, o := h.Spec, layout.Overrides{Names: h.Names, Head: h.Kind}
	want := head.TanhGaussianKind
	if spec.N > 0 {
		want = head.QValuesKind
	}
	mp, b, err := recognise(data, spec, o)
	if err != nil {
		return nil, err
	}
	notes := strings.Join(b.Notes, "; ")
	if b.Head != want {
		return nil, fmt.Errorf("%w: it was bound with the %s head (%s), and this algorithm trains a %s network; %s",
			ErrFineTune, b.Head, notes, want, wrongHeadAdvice(want))
	}
	x := newDenseIndex(mp)
	d := &Dense{Binding: b, proto: mp}
	outs := []string{b.Params}
	if want == head.TanhGaussianKind {
		switch {
		case b.LogStd == "":
			d.FreshLogStd = true
		case x.inits[b.LogStd] != nil:
			return nil, fmt.Errorf("%w: its log std is the parameter %s, one value for every observation (a Gaussian policy, PPO's); SAC's actor computes it from the observation: fine-tune this policy with --algo ppo",
				ErrFineTune, b.LogStd)
		default:
			raw, lo, hi, err := x.clip(b.LogStd)
			if err != nil {
				return nil, fmt.Errorf("%w; fine-tune this policy with --algo ppo, which trains any graph", err)
			}
			outs, d.LogStdMin, d.LogStdMax = append(outs, raw), lo, hi
		}
	}
	if err := d.trace(x, b.Observation, outs, spec); err != nil {
		return nil, fmt.Errorf("%w (%s); --algo dqn and sac fine-tune a plain MLP (dense layers, ReLU or Tanh between them, on the observations): fine-tune this policy with --algo ppo, which trains any graph", err, notes)
	}
	if d.FreshLogStd {
		d.addLogStd(spec)
	}
	d.Notes = append(d.Notes, notes, fmt.Sprintf("a dense network %d→%v, %s", d.Net.In, d.Net.Sizes, actName(d.Net.Act)))
	if d.FreshLogStd {
		d.Notes = append(d.Notes, fmt.Sprintf("the graph has no log std: a new log-std layer on the last hidden layer starts at σ = %.2g (policy.onnx keeps the graph's outputs; the layer is in the checkpoints)", math.Exp(InitLogStd)))
	} else if want == head.TanhGaussianKind {
		d.Notes = append(d.Notes, fmt.Sprintf("log std clipped to [%g, %g] as the graph clips it", d.LogStdMin, d.LogStdMax))
	}
	return d, nil
}

func wrongHeadAdvice(want head.Kind) string {
	if want == head.QValuesKind {
		return "--algo dqn fine-tunes a Q-network (one value per action, the greedy action its largest); a policy's logits are not Q-values: fine-tune it with --algo ppo, or bind its outputs as Q-values with --head qvalues if that is what they are"
	}
	return "--algo sac fine-tunes a tanh-squashed Gaussian actor (SAC's, Stable-Baselines3's or CleanRL's); fine-tune another policy with --algo ppo, or bind an SB3 1.x SAC actor's pre-tanh mean with --head tanh-gaussian"
}

func actName(a kernels.Act) string {
	if a == kernels.Tanh {
		return "tanh"
	}
	return "relu"
}

// ActivationName is Net's hidden activation as the config names it ("relu" or "tanh").
func (d *Dense) ActivationName() string { return actName(d.Net.Act) }

// Hidden is Net's hidden widths.
func (d *Dense) Hidden() []int { return append([]int(nil), d.Net.Sizes[:len(d.Net.Sizes)-1]...) }

// denseLayer is one dense layer found in the graph.
type denseLayer struct {
	x            string // its input tensor
	weight, bias string
	transB       bool
	in, out      int
	node         string // what it was, for errors
}

// trace follows each of outs back to the observation input obs, through dense layers and
// activations, and builds the native network: the hidden layers shared by every output, then
// one output layer holding each output's columns in turn.
func (d *Dense) trace(x *denseIndex, obs string, outs []string, spec head.Spec) error {
	var chains [][]denseLayer
	act := kernels.None
	for _, out := range outs {
		chain, a, err := x.chain(obs, out)
		if err != nil {
			return err
		}
		if act != kernels.None && a != kernels.None && a != act {
			return fmt.Errorf("%w: its hidden layers mix ReLU and Tanh; the native network has one hidden activation", ErrNotDense)
		}
		if a != kernels.None {
			act = a
		}
		chains = append(chains, chain)
	}
	first := chains[0]
	for i, c := range chains[1:] {
		if len(c) != len(first) || c[len(c)-1].x != first[len(first)-1].x {
			return fmt.Errorf("%w: %s and %s are computed from different hidden layers (%s and %s); the native actor reads both from its last hidden layer",
				ErrNotDense, outs[0], outs[i+1], first[len(first)-1].x, c[len(c)-1].x)
		}
	}
	if act == kernels.None {
		act = kernels.ReLU // no hidden layer: the activation is never applied
	}
	hidden := make([]int, 0, len(first)-1)
	for _, l := range first[:len(first)-1] {
		hidden = append(hidden, l.out)
	}
	width := 0
	for _, c := range chains {
		width += c[len(c)-1].out
	}
	if n := obsSize(spec); first[0].in != n {
		return fmt.Errorf("%w: its first layer (%s) takes %d inputs and the env's observation has %d values", ErrNotDense, first[0].node, first[0].in, n)
	}
	net, err := mlp.New(first[0].in, hidden, width, act)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotDense, err)
	}
	d.Net, d.parts = net, make([][]densePart, len(net.Sizes))
	for l, layer := range first[:len(first)-1] {
		d.parts[l] = []densePart{{weight: layer.weight, bias: layer.bias, transB: layer.transB, cols: [2]int{0, layer.out}, in: layer.in}}
	}
	col := 0
	for _, c := range chains {
		last := c[len(c)-1]
		d.parts[len(net.Sizes)-1] = append(d.parts[len(net.Sizes)-1],
			densePart{weight: last.weight, bias: last.bias, transB: last.transB, cols: [2]int{col, col + last.out}, in: last.in})
		col += last.out
	}
	d.Params = make([]float32, net.NumParams())
	return d.read(x)
}

// addLogStd widens the output layer by the action's dimensions: a new log-std layer, weights
// 0 and bias InitLogStd, clipped to SAC's default bounds.
func (d *Dense) addLogStd(spec head.Spec) {
	old, oldP := d.Net, d.Params
	a := len(spec.Low)
	hidden := d.Hidden()
	net, _ := mlp.New(old.In, hidden, old.Out()+a, old.Act) // checked shapes, one layer wider
	p := make([]float32, net.NumParams())
	last := len(net.Sizes) - 1
	for l := range last {
		wo, bo := old.Layer(l)
		nw, _ := net.Layer(l)
		copy(p[nw:], oldP[wo:bo+old.Sizes[l]])
	}
	ow, ob := old.Layer(last)
	nw, nb := net.Layer(last)
	o, n := old.Out(), net.Out()
	in := (ob - ow) / o
	for i := range in {
		copy(p[nw+i*n:nw+i*n+o], oldP[ow+i*o:ow+(i+1)*o])
	}
	copy(p[nb:nb+o], oldP[ob:ob+o])
	for j := o; j < n; j++ {
		p[nb+j] = float32(InitLogStd)
	}
	d.Net, d.Params = net, p
	d.LogStdMin, d.LogStdMax = -20, 2
}

// read copies the graph's values into Params.
func (d *Dense) read(x *denseIndex) error {
	for l, parts := range d.parts {
		wo, bo := d.Net.Layer(l)
		o := d.Net.Sizes[l]
		for _, pt := range parts {
			w, err := x.floats(pt.weight)
			if err != nil {
				return err
			}
			b, err := x.floats(pt.bias)
			if err != nil {
				return err
			}
			k := pt.cols[1] - pt.cols[0]
			for i := range pt.in {
				for c := range k {
					d.Params[wo+i*o+pt.cols[0]+c] = w[pt.index(i, c, k)]
				}
			}
			copy(d.Params[bo+pt.cols[0]:bo+pt.cols[1]], b)
		}
	}
	return nil
}

// index is where input i's weight to column c (of k) is in the stored weight.
func (pt densePart) index(i, c, k int) int {
	if pt.transB {
		return c*pt.in + i
	}
	return i*k + c
}

// WriteBack returns the original graph with p (Params' layout: the trained network) as its
// values: only the initializers of the imported layers change (written as raw float32 data);
// every name, the opset, the inputs and outputs and their batch stay. A fresh log-std layer
// has no place in the graph and is left out.
func (d *Dense) WriteBack(p []float32) ([]byte, error) {
	if len(p) != d.Net.NumParams() {
		return nil, fmt.Errorf("engine: writing back %d values into a network of %d", len(p), d.Net.NumParams())
	}
	out := proto.Clone(d.proto).(*onnxpb.ModelProto)
	inits := map[string]*onnxpb.TensorProto{}
	for _, t := range out.GetGraph().GetInitializer() {
		inits[t.GetName()] = t
	}
	for l, parts := range d.parts {
		wo, bo := d.Net.Layer(l)
		o := d.Net.Sizes[l]
		for _, pt := range parts {
			k := pt.cols[1] - pt.cols[0]
			w := make([]float32, pt.in*k)
			for i := range pt.in {
				for c := range k {
					w[pt.index(i, c, k)] = p[wo+i*o+pt.cols[0]+c]
				}
			}
			setFloats(inits[pt.weight], w)
			setFloats(inits[pt.bias], p[bo+pt.cols[0]:bo+pt.cols[1]])
		}
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("engine: writing back the policy: %w", err)
	}
	return data, nil
}

func setFloats(t *onnxpb.TensorProto, v []float32) {
	raw := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	t.RawData, t.FloatData = raw, nil
}

// denseIndex finds a graph's producers, initializers and constants by tensor name.
type denseIndex struct {
	producer map[string]*onnxpb.NodeProto
	inits    map[string]*onnxpb.TensorProto
}

func newDenseIndex(mp *onnxpb.ModelProto) *denseIndex {
	x := &denseIndex{producer: map[string]*onnxpb.NodeProto{}, inits: map[string]*onnxpb.TensorProto{}}
	for _, n := range mp.GetGraph().GetNode() {
		for _, o := range n.GetOutput() {
			x.producer[o] = n
		}
	}
	for _, t := range mp.GetGraph().GetInitializer() {
		x.inits[t.GetName()] = t
	}
	return x
}

// describe names node n for an error.
func describe(n *onnxpb.NodeProto) string {
	if n.GetName() != "" {
		return fmt.Sprintf("%s node %q", n.GetOpType(), n.GetName())
	}
	return fmt.Sprintf("%s node making %v", n.GetOpType(), n.GetOutput())
}

// maxDenseLayers bounds the layers traced (a graph with a cycle, or a very deep one, stops).
const maxDenseLayers = 64

// chain follows out back to obs: dense layers, an activation between each two, and only
// shape-preserving ops (Cast to float, Flatten on axis 1, Identity) between the observation
// and the first layer. It returns the layers from the first and their activation (None with
// no hidden layer).
func (x *denseIndex) chain(obs, out string) ([]denseLayer, kernels.Act, error) {
	var layers []denseLayer
	act := kernels.None
	t := out
	for range maxDenseLayers {
		l, err := x.linear(t)
		if err != nil {
			return nil, 0, err
		}
		layers = append([]denseLayer{l}, layers...)
		t = l.x
		n := x.producer[t]
		if n != nil && (n.GetOpType() == "Relu" || n.GetOpType() == "Tanh") {
			a := kernels.ReLU
			if n.GetOpType() == "Tanh" {
				a = kernels.Tanh
			}
			if act != kernels.None && a != act {
				return nil, 0, fmt.Errorf("%w: its hidden layers mix ReLU and Tanh; the native network has one hidden activation", ErrNotDense)
			}
			act, t = a, n.GetInput()[0]
			continue
		}
		if err := x.reachesInput(t, obs); err != nil {
			return nil, 0, err
		}
		for i := 1; i < len(layers); i++ {
			if layers[i].in != layers[i-1].out {
				return nil, 0, fmt.Errorf("%w: %s takes %d inputs from a layer of %d outputs", ErrNotDense, layers[i].node, layers[i].in, layers[i-1].out)
			}
		}
		return layers, act, nil
	}
	return nil, 0, fmt.Errorf("%w: more than %d layers before %s", ErrNotDense, maxDenseLayers, out)
}

// reachesInput checks that t is the observation input obs, through shape-preserving ops only.
func (x *denseIndex) reachesInput(t, obs string) error {
	for t != obs {
		n := x.producer[t]
		if n == nil {
			return fmt.Errorf("%w: the first dense layer reads %s, which is neither the observation input %s nor computed from it", ErrNotDense, t, obs)
		}
		switch op := n.GetOpType(); {
		case op == "Identity", op == "Cast" && n.AttrInt("to", 0) == 1, op == "Flatten" && n.AttrInt("axis", 1) == 1:
			t = n.GetInput()[0]
		default:
			return fmt.Errorf("%w: the first dense layer reads the observations through a %s (an observation normaliser, a feature extractor or another op the native network does not have)",
				ErrNotDense, describe(n))
		}
	}
	return nil
}

// linear is the dense layer whose output is t: Gemm(x, W, b) (alpha and beta 1, x not
// transposed), or Add of MatMul(x, W) and b, W and b initializers of float32.
func (x *denseIndex) linear(t string) (denseLayer, error) {
	n := x.producer[t]
	if n == nil {
		return denseLayer{}, fmt.Errorf("%w: %s is not computed by a layer (an input or an initializer)", ErrNotDense, t)
	}
	switch n.GetOpType() {
	case "Gemm":
		in := n.GetInput()
		if len(in) < 3 || in[2] == "" {
			return denseLayer{}, fmt.Errorf("%w: the %s has no bias; the native layers have one", ErrNotDense, describe(n))
		}
		if a := n.Attr("alpha"); a != nil && a.GetF() != 1 {
			return denseLayer{}, fmt.Errorf("%w: the %s scales its product (alpha %g)", ErrNotDense, describe(n), a.GetF())
		}
		if b := n.Attr("beta"); b != nil && b.GetF() != 1 {
			return denseLayer{}, fmt.Errorf("%w: the %s scales its bias (beta %g)", ErrNotDense, describe(n), b.GetF())
		}
		if n.AttrInt("transA", 0) != 0 {
			return denseLayer{}, fmt.Errorf("%w: the %s transposes its input (transA)", ErrNotDense, describe(n))
		}
		return x.layer(n, in[0], in[1], in[2], n.AttrInt("transB", 0) != 0)
	case "Add":
		in := n.GetInput()
		for k := range 2 {
			mm := x.producer[in[k]]
			if mm != nil && mm.GetOpType() == "MatMul" && x.inits[in[1-k]] != nil {
				return x.layer(mm, mm.GetInput()[0], mm.GetInput()[1], in[1-k], false)
			}
		}
	}
	return denseLayer{}, fmt.Errorf("%w: %s is computed by a %s where a dense layer (Gemm, or MatMul then Add of a bias) was expected", ErrNotDense, t, describe(n))
}

// layer checks a dense layer's weight and bias initializers and their shapes.
func (x *denseIndex) layer(n *onnxpb.NodeProto, in, w, b string, transB bool) (denseLayer, error) {
	wt, bt := x.inits[w], x.inits[b]
	if wt == nil || bt == nil {
		return denseLayer{}, fmt.Errorf("%w: the %s takes its weight or bias from a computed tensor, not an initializer", ErrNotDense, describe(n))
	}
	dims := wt.GetDims()
	if len(dims) != 2 {
		return denseLayer{}, fmt.Errorf("%w: the %s's weight %s has shape %v, want 2 dimensions", ErrNotDense, describe(n), w, dims)
	}
	l := denseLayer{x: in, weight: w, bias: b, transB: transB, in: int(dims[0]), out: int(dims[1]), node: describe(n)}
	if transB {
		l.in, l.out = l.out, l.in
	}
	size := int64(1)
	for _, d := range bt.GetDims() {
		size *= d
	}
	if size != int64(l.out) {
		return denseLayer{}, fmt.Errorf("%w: the %s's bias %s has %d values for %d outputs", ErrNotDense, describe(n), b, size, l.out)
	}
	return l, nil
}

// clip is the tensor a log std's Clip reads and its bounds.
func (x *denseIndex) clip(t string) (raw string, lo, hi float64, err error) {
	n := x.producer[t]
	if n == nil || n.GetOpType() != "Clip" {
		what := "an input"
		if n != nil {
			what = "a " + describe(n)
		}
		return "", 0, 0, fmt.Errorf("%w: its log std %s is computed by %s; --algo sac fine-tunes a log std clipped as Stable-Baselines3's SAC clips it (a dense layer, then Clip)",
			ErrNotDense, t, what)
	}
	in := n.GetInput()
	lo, hi = math.Inf(-1), math.Inf(1)
	if a := n.Attr("min"); a != nil { // opset < 11
		lo = float64(a.GetF())
	}
	if a := n.Attr("max"); a != nil {
		hi = float64(a.GetF())
	}
	for k, v := range []*float64{&lo, &hi} {
		if len(in) > k+1 && in[k+1] != "" {
			if *v, err = x.scalar(in[k+1]); err != nil {
				return "", 0, 0, err
			}
		}
	}
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) || !(lo < hi) {
		return "", 0, 0, fmt.Errorf("%w: its log std's %s clips to [%g, %g]; SAC's log std needs both bounds", ErrNotDense, describe(n), lo, hi)
	}
	return in[0], lo, hi, nil
}

// scalar is the one value of a constant tensor (an initializer or a Constant node's).
func (x *denseIndex) scalar(name string) (float64, error) {
	t := x.inits[name]
	if n := x.producer[name]; t == nil && n != nil && n.GetOpType() == "Constant" {
		if a := n.Attr("value"); a != nil {
			t = a.GetT()
		}
	}
	if t == nil {
		return 0, fmt.Errorf("%w: %s is not a constant", ErrNotDense, name)
	}
	v, err := tensorFloats(t)
	if err != nil || len(v) != 1 {
		return 0, fmt.Errorf("%w: %s is not one float32 value", ErrNotDense, name)
	}
	return float64(v[0]), nil
}

// floats is an initializer's float32 values.
func (x *denseIndex) floats(name string) ([]float32, error) {
	return tensorFloats(x.inits[name])
}

func tensorFloats(t *onnxpb.TensorProto) ([]float32, error) {
	if t.GetDataType() != int32(onnxpb.TensorProto_FLOAT) {
		return nil, fmt.Errorf("%w: the initializer %s holds %s values; the native network trains float32",
			ErrNotDense, t.GetName(), onnxpb.TensorProto_DataType(t.GetDataType()))
	}
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return nil, fmt.Errorf("%w: the initializer %s is stored outside the model file (external data); save the model with its weights inside", ErrNotDense, t.GetName())
	}
	n := int64(1)
	for _, d := range t.GetDims() {
		n *= d
	}
	if raw := t.GetRawData(); len(raw) > 0 {
		if int64(len(raw)) != 4*n {
			return nil, fmt.Errorf("%w: the initializer %s holds %d bytes for %d values", ErrNotDense, t.GetName(), len(raw), n)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return v, nil
	}
	if int64(len(t.GetFloatData())) != n {
		return nil, fmt.Errorf("%w: the initializer %s holds %d values for shape %v", ErrNotDense, t.GetName(), len(t.GetFloatData()), t.GetDims())
	}
	return append([]float32(nil), t.GetFloatData()...), nil
}
