package edit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// none is the batch axis of a tensor that has no batch dimension.
const none = -1

// sval is one element of a small integer tensor followed by value (shapes, axes, indices):
// a constant, or dyn when it depends on the batch size.
type sval struct {
	v   int64
	dyn bool
}

// tinfo is what the analysis knows about one tensor.
type tinfo struct {
	axis  int     // batch axis, or none
	known bool    // shape is known
	shape []int64 // concrete shape at the fixed batch
	sym   []sval  // values, for small integer tensors; nil when not followed
	deps  []int   // the chooser's decisions this tensor's batch axis depends on, ascending
	// squeezed: the original squeezed the batch (of 1) away upstream, so the shape measured at
	// the fixed batch lacks the batch dimension; shape has it put back.
	squeezed bool
}

func (t *tinfo) rank() int {
	if t == nil || !t.known {
		return -1
	}
	return len(t.shape)
}

// consts returns the values of t when all are known constants.
func (t *tinfo) consts() ([]int64, bool) {
	if t == nil || t.sym == nil {
		return nil, false
	}
	out := make([]int64, len(t.sym))
	for k, s := range t.sym {
		if s.dyn {
			return nil, false
		}
		out[k] = s.v
	}
	return out, true
}

// plan is the outcome of a successful analysis: every tensor's batch axis and the edits that
// free the batch.
type plan struct {
	inputs  map[string]int // batched graph inputs → batch axis
	axes    map[string]int // batch axis of every tensor analysed (none: not batched)
	edits   []inputEdit
	attrs   []attrEdit
	fixes   []fix
	assumed []string
	// ranks: a Squeeze no longer squeezes the batch away, so tensors after it gain a dimension
	// and the declared shapes downstream no longer hold.
	ranks bool
}

// inputEdit replaces input `input` of node (appends it when input == len(node.Input)) with a
// new integer constant.
type inputEdit struct {
	node  *onnxpb.NodeProto
	input int
	dtype int32
	vals  []int64
	note  string
}

// attrEdit sets an ints attribute of a node.
type attrEdit struct {
	node *onnxpb.NodeProto
	name string
	ints []int64
	note string
}

// fix makes input `input` of node follow the batch at run time: a tensor that is the same for
// every row (a constant row, a zero state) with the fixed batch on axis `axis`. gather keeps its
// first row (fixed batch > 1); expand repeats it to the run-time batch.
type fix struct {
	node   *onnxpb.NodeProto
	input  int
	axis   int
	rank   int
	gather bool
	expand bool
}

// chooser searches the analysis' ambiguous decisions (which axis of an input is the batch,
// which dimension of a Reshape's output carries it) depth first with conflict-directed
// backjumping: every run records the decisions it meets, in order, and the number of options
// of each; a run that fails names the decisions its failure depends on (the culprits), and next
// changes the latest of them, since changing a later decision cannot avoid that failure. When a
// decision has no options left, the search jumps back to the latest culprit among the failures
// it saw, so decisions that never mattered (the states of another recurrent layer) are not
// enumerated.
type chooser struct {
	picks []int   // the options to take at the first decisions met
	sites []int   // the number of options of each decision met this run
	conf  [][]int // per decision, the culprits of the failures that jumped back to it
}

// pick takes one of n options at the next decision and returns it with the decision's index
// (-1 when there is no choice).
func (c *chooser) pick(n int) (int, int) {
	if n <= 1 {
		return 0, -1
	}
	i := len(c.sites)
	c.sites = append(c.sites, n)
	if i < len(c.picks) {
		return c.picks[i] % n, i
	}
	return 0, i
}

// next moves to the next combination after a failure that depends on the decisions culprits
// (all decisions of the run when culprits is nil); false when no combination is left that
// could avoid it.
func (c *chooser) next(culprits []int) bool {
	sites := c.sites
	picks := make([]int, len(sites))
	copy(picks, c.picks)
	c.sites, c.picks = nil, nil
	if culprits == nil {
		for i := range sites {
			culprits = append(culprits, i)
		}
	}
	for len(c.conf) < len(sites) {
		c.conf = append(c.conf, nil)
	}
	for len(culprits) > 0 {
		i := slices.Max(culprits)
		if i >= len(sites) {
			return false
		}
		rest := slices.DeleteFunc(slices.Clone(culprits), func(j int) bool { return j == i })
		c.conf[i] = union(c.conf[i], rest)
		if picks[i]+1 < sites[i] {
			picks[i]++
			c.picks = picks[:i+1]
			c.conf = c.conf[:i+1]
			return true
		}
		culprits, c.conf[i] = c.conf[i], nil
	}
	return false
}

// union merges two ascending lists of decisions.
func union(a, b []int) []int {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// siteError is an analysis failure with the decisions it depends on.
type siteError struct {
	err   error
	sites []int
}

func (e *siteError) Error() string { return e.err.Error() }
func (e *siteError) Unwrap() error { return e.err }

// analysis propagates the batch axis from the graph inputs through the nodes.
type analysis struct {
	ix       *graphIndex
	batch    int64
	observed map[string][]int64 // shapes ONNX Runtime reported at the fixed batch
	inShapes map[string][]int64 // concrete input shapes at the fixed batch
	forced   map[string]int     // batch axes the caller gave
	choose   *chooser
	seen     map[string]*tinfo
	p        *plan
	picked   []int // decisions taken at the node being visited
}

// pick takes one of n options at a decision of the node being visited.
func (a *analysis) pick(n int) int {
	v, site := a.choose.pick(n)
	if site >= 0 {
		a.picked = append(a.picked, site)
	}
	return v
}

// analyse runs the analysis once with the chooser's current decisions.
func analyse(ix *graphIndex, batch int64, inShapes, observed map[string][]int64, forced map[string]int, c *chooser) (*plan, error) {
	a := &analysis{
		ix: ix, batch: batch, observed: observed, inShapes: inShapes, forced: forced, choose: c,
		seen: map[string]*tinfo{},
		p:    &plan{inputs: map[string]int{}, axes: map[string]int{}},
	}
	for name, t := range ix.inits {
		info := &tinfo{axis: none, known: true, shape: slices.Clone(t.GetDims())}
		if isIntType(t.GetDataType()) {
			if v, ok := intsOf(t); ok {
				info.sym = constSym(v)
			}
		}
		a.seen[name] = info
	}
	for _, vi := range ix.inputs {
		name := vi.GetName()
		shape := inShapes[name]
		info := &tinfo{axis: none, known: true, shape: shape}
		if ax, ok := forced[name]; ok {
			info.axis = ax
		} else {
			var cands []int
			for k, d := range shape {
				if d == batch {
					cands = append(cands, k)
				}
			}
			if len(cands) > 0 {
				v, site := c.pick(len(cands))
				info.axis = cands[v]
				if site >= 0 {
					info.deps = []int{site}
				}
			}
		}
		if info.axis != none {
			a.p.inputs[name] = info.axis
		}
		a.seen[name] = info
	}
	if len(a.p.inputs) == 0 {
		return nil, &siteError{err: fmt.Errorf("no graph input has a dimension equal to the fixed batch %d", batch), sites: []int{}}
	}
	for _, n := range topoOrder(ix) {
		if err := a.visit(n); err != nil {
			return nil, err
		}
	}
	for name, t := range a.seen {
		a.p.axes[name] = t.axis
	}
	return a.p, nil
}

func constSym(v []int64) []sval {
	s := make([]sval, len(v))
	for k, x := range v {
		s[k] = sval{v: x}
	}
	return s
}

func isIntType(dt int32) bool {
	switch onnxpb.TensorProto_DataType(dt) {
	case onnxpb.TensorProto_INT64, onnxpb.TensorProto_INT32, onnxpb.TensorProto_INT16, onnxpb.TensorProto_INT8,
		onnxpb.TensorProto_UINT8, onnxpb.TensorProto_UINT16, onnxpb.TensorProto_BOOL:
		return true
	}
	return false
}

// refuse says why node n keeps the batch from being freed. Under other choices of the
// ambiguous decisions (see chooser) the analysis may still succeed.
func (a *analysis) refuse(n *onnxpb.NodeProto, format string, args ...any) error {
	return fmt.Errorf("%s: %s", nodeRef(n), fmt.Sprintf(format, args...))
}

// Operators whose outputs have their first input's shape, element by element.
var unaryOps = setOf("Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Cast",
	"CastLike", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu",
	"HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Not",
	"Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus",
	"Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu", "QuantizeLinear", "DequantizeLinear",
	"Bernoulli", "RandomNormalLike", "RandomUniformLike")

// Operators that broadcast all their inputs together (numpy rules).
var broadcastOps = setOf("Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal",
	"Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow",
	"PRelu", "Sub", "Sum", "Where", "Xor")

var reduceOps = setOf("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
	"ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "ArgMax", "ArgMin")

// Operators on [N, C, spatial...] tensors: the batch must be axis 0.
var spatialOps = setOf("Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool",
	"LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "BatchNormalization",
	"InstanceNormalization", "GroupNormalization", "LRN", "DepthToSpace", "SpaceToDepth", "MaxUnpool",
	"MaxRoiPool", "RoiAlign", "Upsample", "Resize", "Col2Im", "GridSample", "DeformConv")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// visit analyses one node and records its outputs.
func (a *analysis) visit(n *onnxpb.NodeProto) error {
	ins := make([]*tinfo, len(n.GetInput()))
	for k, name := range n.GetInput() {
		if name == "" {
			continue
		}
		t, ok := a.seen[name]
		if !ok {
			return a.refuse(n, "input %q is not computed before it", name)
		}
		ins[k] = t
	}
	a.picked = a.picked[:0]
	var deps []int
	for _, t := range ins {
		if t != nil {
			deps = union(deps, t.deps)
		}
	}
	fail := func(err error) error {
		return &siteError{err: err, sites: append([]int{}, union(deps, a.picked)...)} // never nil: nil means "any"
	}
	outs := make([]*tinfo, len(n.GetOutput()))
	for k := range outs {
		outs[k] = &tinfo{axis: none}
	}
	if err := a.rule(n, ins, outs); err != nil {
		return fail(err)
	}
	deps = union(deps, a.picked)
	if len(outs) > 0 && outs[0].sym == nil {
		outs[0].sym = a.symOf(n, ins)
	}
	squeezed := false
	for _, t := range ins {
		squeezed = squeezed || t != nil && t.axis != none && t.squeezed
	}
	for k, name := range n.GetOutput() {
		if name == "" {
			continue
		}
		t := outs[k]
		t.squeezed = t.axis != none && (t.squeezed || squeezed && n.GetOpType() != "Reshape")
		if s, ok := a.observed[name]; ok {
			t.shape, t.known = s, true
			if t.squeezed && t.axis <= len(s) {
				t.shape = slices.Insert(slices.Clone(s), t.axis, 1)
			}
		}
		if t.axis != none && t.known && (t.axis >= len(t.shape) || t.shape[t.axis] != a.batch) {
			return fail(a.refuse(n, "output %q would carry the batch on axis %d, but its shape at the fixed batch is %v", name, t.axis, t.shape))
		}
		t.deps = deps
		if _, dup := a.seen[name]; !dup {
			a.seen[name] = t
		}
	}
	return nil
}

// batchedInputs returns the indices of the inputs that carry the batch.
func batchedInputs(ins []*tinfo) []int {
	var out []int
	for k, t := range ins {
		if t != nil && t.axis != none {
			out = append(out, k)
		}
	}
	return out
}

// in returns input k, or nil when the node has no such input.
func in(ins []*tinfo, k int) *tinfo {
	if k < len(ins) {
		return ins[k]
	}
	return nil
}

func allAxes(outs []*tinfo, axis int) {
	for _, t := range outs {
		t.axis = axis
	}
}

// rule applies the operator's batch rule: it sets the outputs' axes (and shapes it derives) and
// records the edits the batch needs.
func (a *analysis) rule(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	op := n.GetOpType()
	if d := n.GetDomain(); d != "" && d != "ai.onnx" {
		return a.lenient(n, ins, outs)
	}
	batched := batchedInputs(ins)
	x := in(ins, 0)
	switch {
	case op == "Constant":
		if t := constValue(n); t != nil && len(outs) > 0 {
			outs[0].shape, outs[0].known = slices.Clone(t.GetDims()), true
		}
		return nil
	case op == "If" || op == "Loop" || op == "Scan":
		return a.refuse(n, "control flow is not analysed; the batch cannot be freed across it")
	case unaryOps[op]:
		if x == nil {
			return a.lenient(n, ins, outs)
		}
		for _, t := range outs {
			t.axis, t.shape, t.known = x.axis, x.shape, x.known
		}
		return nil
	case broadcastOps[op]:
		return a.broadcast(n, ins, outs)
	case len(batched) == 0:
		return a.unbatched(n, ins, outs)
	case op == "Shape" || op == "Size":
		return nil // not batched; symOf follows the batch size into its values
	case x == nil:
		return a.lenient(n, ins, outs)
	case reduceOps[op]:
		return a.reduce(n, ins, outs)
	case spatialOps[op]:
		if x.axis != 0 {
			return a.refuse(n, "needs the batch on axis 0 of its input")
		}
		if sizes := in(ins, 3); op == "Resize" && sizes != nil && len(sizes.sym) > 0 && !sizes.sym[0].dyn {
			return a.refuse(n, "resizes to fixed sizes %s, which pin the batch", symString(sizes.sym))
		}
		if idx := n.GetOutput(); op == "MaxPool" && len(idx) > 1 && a.ix.uses[idx[1]] > 0 {
			return a.refuse(n, "its Indices output counts positions across the whole batch")
		}
		allAxes(outs, 0)
		return nil
	}
	switch op {
	case "Softmax", "LogSoftmax", "Hardmax", "LpNormalization":
		def := int64(-1)
		if op != "LpNormalization" && a.ix.opset < 13 {
			def = 1
		}
		ax, ok := normAxis(attrInt(n, "axis", def), x.rank())
		if !ok {
			return a.refuse(n, "rank of its input is unknown")
		}
		if x.axis == ax || (op != "LpNormalization" && a.ix.opset < 13 && x.axis > ax) {
			return a.refuse(n, "normalises across the batch (axis %d)", ax)
		}
		allAxes(outs, x.axis)
		return nil
	case "LayerNormalization":
		if len(batched) != 1 || batched[0] != 0 {
			return a.refuse(n, "scale or bias carries the batch")
		}
		ax, ok := normAxis(attrInt(n, "axis", -1), x.rank())
		if !ok {
			return a.refuse(n, "rank of its input is unknown")
		}
		if x.axis >= ax {
			return a.refuse(n, "normalises across the batch (axes %d and up)", ax)
		}
		allAxes(outs, x.axis)
		return nil
	case "MeanVarianceNormalization":
		axes := []int64{0, 2, 3}
		if at := attr(n, "axes"); at != nil {
			axes = at.GetInts()
		}
		if a.hasAxis(axes, x) {
			return a.refuse(n, "normalises across the batch")
		}
		allAxes(outs, x.axis)
		return nil
	case "CumSum":
		if v, ok := in(ins, 1).consts(); !ok || len(v) != 1 || a.hasAxis(v, x) {
			return a.refuse(n, "sums along the batch, or along an axis computed at run time")
		}
		allAxes(outs, x.axis)
		return nil
	case "TopK", "Split", "Compress":
		def := int64(0)
		if op == "TopK" {
			def = -1
		}
		at := attr(n, "axis")
		if op == "Compress" && at == nil {
			return a.refuse(n, "flattens its input, batch included")
		}
		if a.hasAxis([]int64{attrInt(n, "axis", def)}, x) {
			return a.refuse(n, "works along the batch axis")
		}
		if x.axis == none {
			return a.refuse(n, "an input other than the data carries the batch")
		}
		allAxes(outs, x.axis)
		return nil
	case "Trilu":
		if r := x.rank(); x.axis == none || r < 0 || x.axis >= r-2 {
			return a.refuse(n, "the batch is not among its leading dimensions")
		}
		allAxes(outs, x.axis)
		return nil
	case "ReverseSequence":
		if int64(x.axis) != attrInt(n, "batch_axis", 1) {
			return a.refuse(n, "needs the batch on axis %d", attrInt(n, "batch_axis", 1))
		}
		if err := a.sameRow(n, ins, 1, 0); err != nil {
			return err
		}
		allAxes(outs, x.axis)
		return nil
	case "OneHot":
		if x.axis == none || x.rank() < 0 {
			return a.refuse(n, "only its indices may carry the batch")
		}
		ax, ok := normAxis(attrInt(n, "axis", -1), x.rank()+1)
		if !ok {
			return a.refuse(n, "axis out of range")
		}
		out := x.axis
		if out >= ax {
			out++
		}
		allAxes(outs, out)
		return nil
	case "NonZero", "Unique", "NonMaxSuppression", "Range", "EyeLike":
		return a.refuse(n, "its output's shape depends on the batch's contents or size")
	case "Gemm":
		return a.gemm(n, ins, outs)
	case "MatMul", "MatMulInteger", "QLinearMatMul":
		return a.matmul(n, ins, outs)
	case "Einsum":
		return a.einsum(n, ins, outs)
	case "Reshape":
		return a.reshape(n, ins, outs)
	case "Flatten":
		return a.flatten(n, ins, outs)
	case "Squeeze":
		return a.squeeze(n, ins, outs)
	case "Unsqueeze":
		return a.unsqueeze(n, ins, outs)
	case "Transpose":
		r := x.rank()
		perm := make([]int64, max(r, 0))
		for k := range perm {
			perm[k] = int64(r - 1 - k)
		}
		if at := attr(n, "perm"); at != nil {
			perm = at.GetInts()
		}
		for k, p := range perm {
			if int(p) == x.axis {
				allAxes(outs, k)
				return nil
			}
		}
		return a.refuse(n, "its permutation %v does not keep axis %d", perm, x.axis)
	case "Expand":
		return a.expand(n, ins, outs)
	case "Tile":
		reps := in(ins, 1)
		if x.axis == none {
			return a.refuse(n, "its repeats depend on the batch")
		}
		if reps == nil || x.axis >= len(reps.sym) {
			return a.refuse(n, "its repeats are not known")
		}
		if r := reps.sym[x.axis]; r.dyn || r.v != 1 {
			return a.refuse(n, "repeats the batch (repeats %s)", symString(reps.sym))
		}
		allAxes(outs, x.axis)
		return nil
	case "Concat":
		return a.concat(n, ins, outs)
	case "Slice":
		return a.slice(n, ins, outs)
	case "Gather":
		return a.gather(n, ins, outs)
	case "GatherElements", "ScatterElements", "Scatter", "ScatterND":
		return a.elements(n, ins, outs)
	case "GatherND":
		if idx := in(ins, 1); x.axis == 0 && idx != nil && idx.axis == 0 && attrInt(n, "batch_dims", 0) >= 1 {
			allAxes(outs, 0)
			return nil
		}
		return a.lenient(n, ins, outs)
	case "Pad":
		return a.pad(n, ins, outs)
	case "RNN", "GRU", "LSTM":
		return a.recurrent(n, ins, outs)
	}
	return a.lenient(n, ins, outs)
}

// lenient handles an operator the analysis does not know: each output whose shape has the rank of
// the first batched input and the fixed batch on the same axis is taken as batched there. The
// verification decides whether that was right; the plan records the assumption.
func (a *analysis) lenient(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	batched := batchedInputs(ins)
	if len(batched) == 0 {
		return a.unbatched(n, ins, outs)
	}
	x := ins[batched[0]]
	for k, name := range n.GetOutput() {
		s, ok := a.observed[name]
		if name == "" || !ok || len(s) != x.rank() || x.axis >= len(s) || s[x.axis] != a.batch {
			return a.refuse(n, "cannot tell how operator %s treats the batch", n.GetOpType())
		}
		outs[k].axis = x.axis
	}
	a.p.assumed = append(a.p.assumed, fmt.Sprintf("%s keeps the batch on axis %d", nodeRef(n), x.axis))
	return nil
}

// unbatched handles a node none of whose inputs carries the batch. Its outputs carry none
// either, unless it builds a tensor from a shape that holds the batch size.
func (a *analysis) unbatched(n *onnxpb.NodeProto, ins, outs []*tinfo) error {
	var shape *tinfo
	switch n.GetOpType() {
	case "ConstantOfShape":
		shape = in(ins, 0)
	case "Reshape", "Expand", "Tile":
		shape = in(ins, 1)
	case "Range":
		for _, t := range ins {
			if t != nil && t.sym != nil && len(t.sym) == 1 && t.sym[0].dyn {
				return a.refuse(n, "counts up to the batch size")
			}
		}
	}
	if shape == nil || shape.sym == nil || len(outs) == 0 {
		return nil
	}
	for k, s := range shape.sym {
		if s.dyn {
			r := len(shape.sym)
			if o := a.observed[n.GetOutput()[0]]; len(o) > r {
				k += len(o) - r // Expand's output may have a higher rank than its shape
			}
			allAxes(outs, k)
			return nil
		}
	}
	return nil
}

// hasAxis reports whether axes (possibly negative) include t's batch axis.
func (a *analysis) hasAxis(axes []int64, t *tinfo) bool {
	if t == nil || t.axis == none {
		return false
	}
	for _, ax := range axes {
		if v, ok := normAxis(ax, t.rank()); ok && v == t.axis {
			return true
		}
		if ax == int64(t.axis) {
			return true
		}
	}
	return false
}

// normAxis maps a possibly negative axis onto 0..rank-1.
func normAxis(ax int64, rank int) (int, bool) {
	if rank < 0 {
		return 0, false
	}
	if ax < 0 {
		ax += int64(rank)
	}
	if ax < 0 || ax >= int64(rank) {
		return 0, false
	}
	return int(ax), true
}

func symString(s []sval) string {
	parts := make([]string, len(s))
	for k, v := range s {
		if v.dyn {
			parts[k] = "N"
		} else {
			parts[k] = fmt.Sprint(v.v)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
