package graph

import (
	"fmt"
	"slices"
	"sort"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// op builds one ONNX operator. build gets the node with its inputs resolved and returns its
// outputs; it folds constants itself when it can.
type op struct {
	build func(b *builder, n *onode) ([]value, error)
}

// ops is the importer's operator table, keyed by ONNX op_type (default domain).
var ops map[string]op

func init() {
	ops = map[string]op{
		"Add":        {elementwise("Add")},
		"Sub":        {elementwise("Sub")},
		"Mul":        {elementwise("Mul")},
		"Div":        {elementwise("Div")},
		"Relu":       {unary(G.Rectify)},
		"Tanh":       {unary(G.Tanh)},
		"Sigmoid":    {unary(G.Sigmoid)},
		"Exp":        {unary(G.Exp)},
		"Neg":        {unary(G.Neg)},
		"Gemm":       {buildGemm},
		"MatMul":     {buildMatMul},
		"Softmax":    {softmax(false)},
		"LogSoftmax": {softmax(true)},
		"Conv":       {buildConv},
		"Flatten":    {buildFlatten},
		"Reshape":    {buildReshape},
		"Concat":     {buildConcat},
		"Identity":   {func(b *builder, n *onode) ([]value, error) { return n.in[:1], nil }},
		"Constant":   {buildConstant},
		"Unsqueeze":  {buildUnsqueeze},
		"Squeeze":    {buildSqueeze},
		"Shape":      {buildShape},
		"Expand":     {buildExpand},
		"Gather":     {buildGather},

		"Cast":               {buildCast},
		"Clip":               {buildClip},
		"Where":              {buildWhere},
		"Min":                {buildVariadic("Min")},
		"Max":                {buildVariadic("Max")},
		"Sum":                {buildVariadic("Sum")},
		"Mean":               {buildVariadic("Mean")},
		"ArgMax":             {buildArg},
		"ArgMin":             {buildArg},
		"Transpose":          {buildTranspose},
		"Slice":              {buildSlice},
		"Split":              {buildSplit},
		"Tile":               {buildTile},
		"GatherElements":     {buildGatherElements},
		"ConstantOfShape":    {buildConstantOfShape},
		"Range":              {buildRange},
		"LayerNormalization": {buildLayerNorm},
		"If":                 {buildIf},
		"LSTM":               {buildLSTM},
		"GRU":                {buildGRU},
		"RNN":                {buildRNN},
	}
	for name, f := range unaryOps {
		ops[name] = op{f}
	}
	for name := range binaryOps {
		ops[name] = op{buildBinary(name)}
	}
	for name := range reduceKinds {
		ops[name] = op{buildReduce}
	}
}

// SupportedOps lists the ONNX operators (default domain) the importer handles, sorted.
func SupportedOps() []string {
	out := make([]string, 0, len(ops))
	for name := range ops {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func arity(n *onode, min, max int) error {
	if len(n.in) < min || len(n.in) > max {
		return fmt.Errorf("%w: %d inputs; want %d to %d", ErrModel, len(n.in), min, max)
	}
	for k := range min {
		if !n.has(k) {
			return fmt.Errorf("%w: required input %d is missing", ErrModel, k)
		}
	}
	return nil
}

func one(v *G.Node, err error) ([]value, error) {
	if err != nil {
		return nil, err
	}
	return []value{{n: v}}, nil
}

func unary(f func(*G.Node) (*G.Node, error)) func(*builder, *onode) ([]value, error) {
	return func(b *builder, n *onode) ([]value, error) {
		if err := arity(n, 1, 1); err != nil {
			return nil, err
		}
		x, err := b.toNode(n.in[0])
		if err != nil {
			return nil, err
		}
		return one(f(x))
	}
}

func elementwise(kind string) func(*builder, *onode) ([]value, error) {
	return func(b *builder, n *onode) ([]value, error) {
		if err := arity(n, 2, 2); err != nil {
			return nil, err
		}
		x, y := n.in[0], n.in[1]
		if x.c != nil && y.c != nil {
			c, err := foldBinary(kind, x.c, y.c)
			if err != nil {
				return nil, err
			}
			return []value{{c: c}}, nil
		}
		out, err := broadcastShape(x.shape(), y.shape())
		if err != nil {
			return nil, err
		}
		// A one-element constant second operand against a tensor of the output's shape is a
		// scalar. (Not the first: gorgonia's scalar-first ops may write their result into
		// the tensor operand's memory while later nodes still read it.)
		if y.c != nil && y.c.size() == 1 && len(y.c.shape) <= len(out) && slices.Equal(x.shape(), out) {
			y = value{n: b.scalar(y.c.floats()[0])}
		}
		xn, err := b.toNode(x)
		if err != nil {
			return nil, err
		}
		yn, err := b.toNode(y)
		if err != nil {
			return nil, err
		}
		if xn.IsScalar() && !yn.IsScalar() {
			if xn, err = b.broadcastTo(xn, []int(yn.Shape())); err != nil {
				return nil, err
			}
		}
		if xn, yn, err = b.broadcastPair(xn, yn); err != nil {
			return nil, err
		}
		switch kind {
		case "Add":
			return one(G.Add(xn, yn))
		case "Sub":
			return one(G.Sub(xn, yn))
		case "Mul":
			return one(G.HadamardProd(xn, yn))
		default:
			return one(G.HadamardDiv(xn, yn))
		}
	}
}

func buildGemm(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 3); err != nil {
		return nil, err
	}
	a, w, err := b.inputPair(n)
	if err != nil {
		return nil, err
	}
	if a.Dims() != 2 || w.Dims() != 2 {
		return nil, fmt.Errorf("%w: Gemm needs 2-D A and B, got %v and %v", ErrShape, a.Shape(), w.Shape())
	}
	if n.attrInt("transA", 0) != 0 {
		if a, err = G.Transpose(a, 1, 0); err != nil {
			return nil, err
		}
	}
	if n.attrInt("transB", 0) != 0 {
		if w, err = G.Transpose(w, 1, 0); err != nil {
			return nil, err
		}
	}
	if a.Shape()[1] != w.Shape()[0] {
		return nil, fmt.Errorf("%w: Gemm of %v by %v", ErrShape, a.Shape(), w.Shape())
	}
	y, err := G.Mul(a, w)
	if err != nil {
		return nil, err
	}
	if alpha := n.attrFloat("alpha", 1); alpha != 1 {
		if y, err = G.HadamardProd(y, b.scalar(float64(alpha))); err != nil {
			return nil, err
		}
	}
	beta := n.attrFloat("beta", 1)
	if !n.has(2) || beta == 0 {
		return one(y, nil)
	}
	out := []int{a.Shape()[0], w.Shape()[1]}
	if s, err := broadcastShape(out, n.in[2].shape()); err != nil || !slices.Equal(s, out) {
		return nil, fmt.Errorf("%w: Gemm's C of shape %v does not broadcast to %v", ErrShape, n.in[2].shape(), out)
	}
	c, err := b.toNode(n.in[2])
	if err != nil {
		return nil, err
	}
	if beta != 1 {
		if c, err = G.HadamardProd(c, b.scalar(float64(beta))); err != nil {
			return nil, err
		}
	}
	if c, err = b.broadcastTo(c, out); err != nil {
		return nil, err
	}
	return one(G.Add(y, c))
}

func buildMatMul(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 2); err != nil {
		return nil, err
	}
	x, w, err := b.inputPair(n)
	if err != nil {
		return nil, err
	}
	sx, sw := []int(x.Shape()), []int(w.Shape())
	if len(sx) == 0 || len(sw) == 0 {
		return nil, fmt.Errorf("%w: MatMul of a scalar", ErrShape)
	}
	k := sx[len(sx)-1]
	kw := sw[0]
	if len(sw) > 1 {
		kw = sw[len(sw)-2]
	}
	if k != kw {
		return nil, fmt.Errorf("%w: MatMul of %v by %v", ErrShape, sx, sw)
	}
	switch {
	case len(sx) == 1 && len(sw) == 1:
		return one(G.Mul(x, w))
	case len(sw) <= 2:
		// [..., M, K] × [K, N] (or [K]): fold the leading dimensions into M.
		lead := sx[:len(sx)-1]
		nOut := 1
		if len(sw) == 2 {
			nOut = sw[1]
		}
		if x, err = reshape(x, []int{product(lead), k}); err != nil {
			return nil, err
		}
		if w, err = reshape(w, []int{k, nOut}); err != nil {
			return nil, err
		}
		y, err := G.Mul(x, w)
		if err != nil {
			return nil, err
		}
		shape := slices.Clone(lead)
		if len(sw) == 2 {
			shape = append(shape, nOut)
		}
		return one(reshape(y, shape))
	case len(sx) >= 3 && len(sx) == len(sw) && slices.Equal(sx[:len(sx)-2], sw[:len(sw)-2]):
		lead := sx[:len(sx)-2]
		p := product(lead)
		m, nOut := sx[len(sx)-2], sw[len(sw)-1]
		if x, err = reshape(x, []int{p, m, k}); err != nil {
			return nil, err
		}
		if w, err = reshape(w, []int{p, k, nOut}); err != nil {
			return nil, err
		}
		y, err := G.BatchedMatMul(x, w)
		if err != nil {
			return nil, err
		}
		return one(reshape(y, append(slices.Clone(lead), m, nOut)))
	}
	return nil, fmt.Errorf("%w: MatMul of %v by %v: broadcasting batch dimensions is not supported", ErrShape, sx, sw)
}

// softmax follows the opset's rule: from opset 13 the op works along `axis` (default -1)
// alone; before, the input is coerced to 2-D at `axis` (default 1) and the op works along the
// flattened trailing dimensions.
func softmax(log bool) func(*builder, *onode) ([]value, error) {
	return func(b *builder, n *onode) ([]value, error) {
		if err := arity(n, 1, 1); err != nil {
			return nil, err
		}
		x, err := b.toNode(n.in[0])
		if err != nil {
			return nil, err
		}
		// gorgonia's softmax op hashes the same with and without log, so a graph holding
		// both on one tensor would merge them into one node: Softmax is exp(LogSoftmax).
		f := G.LogSoftMax
		if !log {
			f = func(x *G.Node, axes ...int) (*G.Node, error) {
				y, err := G.LogSoftMax(x, axes...)
				if err != nil {
					return nil, err
				}
				return G.Exp(y)
			}
		}
		shape := []int(x.Shape())
		if len(shape) == 0 {
			return nil, fmt.Errorf("%w: softmax of a scalar", ErrShape)
		}
		if b.m.opset >= 13 {
			ax, err := axis(n.attrInt("axis", -1), len(shape))
			if err != nil {
				return nil, err
			}
			return one(f(x, ax))
		}
		ax, err := axis(n.attrInt("axis", 1), len(shape))
		if err != nil {
			return nil, err
		}
		flat := []int{product(shape[:ax]), product(shape[ax:])}
		if x, err = reshape(x, flat); err != nil {
			return nil, err
		}
		y, err := f(x, 1)
		if err != nil {
			return nil, err
		}
		return one(reshape(y, shape))
	}
}

func buildConv(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 3); err != nil {
		return nil, err
	}
	x, w, err := b.inputPair(n)
	if err != nil {
		return nil, err
	}
	sx, sw := []int(x.Shape()), []int(w.Shape())
	if len(sx) != 4 || len(sw) != 4 {
		return nil, fmt.Errorf("%w: only 2-D convolutions (NCHW input, [M,C,kH,kW] kernel) are supported; got %v and %v", ErrUnsupported, sx, sw)
	}
	if g := n.attrInt("group", 1); g != 1 {
		return nil, fmt.Errorf("%w: Conv with group %d; only group 1 is supported", ErrUnsupported, g)
	}
	if sw[1] != sx[1] {
		return nil, fmt.Errorf("%w: Conv of input %v by kernel %v", ErrShape, sx, sw)
	}
	if ks, ok := n.attrInts("kernel_shape"); ok && (len(ks) != 2 || int(ks[0]) != sw[2] || int(ks[1]) != sw[3]) {
		return nil, fmt.Errorf("%w: kernel_shape %v does not match the kernel %v", ErrShape, ks, sw)
	}
	ints2 := func(name string, def int) ([]int, error) {
		v, ok := n.attrInts(name)
		if !ok {
			return []int{def, def}, nil
		}
		if len(v) != 2 || v[0] < 1 || v[1] < 1 {
			return nil, fmt.Errorf("%w: %s %v", ErrModel, name, v)
		}
		return []int{int(v[0]), int(v[1])}, nil
	}
	strides, err := ints2("strides", 1)
	if err != nil {
		return nil, err
	}
	dil, err := ints2("dilations", 1)
	if err != nil {
		return nil, err
	}
	pads := []int{0, 0, 0, 0} // top, left, bottom, right
	switch ap := n.attrString("auto_pad", "NOTSET"); ap {
	case "NOTSET":
		if v, ok := n.attrInts("pads"); ok {
			if len(v) != 4 {
				return nil, fmt.Errorf("%w: pads %v; want 4 values", ErrModel, v)
			}
			for k := range v {
				pads[k] = int(v[k])
			}
		}
	case "VALID":
	case "SAME_UPPER", "SAME_LOWER":
		for d := range 2 {
			in := sx[2+d]
			out := (in + strides[d] - 1) / strides[d]
			total := max(0, (out-1)*strides[d]+dil[d]*(sw[2+d]-1)+1-in)
			small, big := total/2, total-total/2
			if ap == "SAME_UPPER" {
				pads[d], pads[2+d] = small, big
			} else {
				pads[d], pads[2+d] = big, small
			}
		}
	default:
		return nil, fmt.Errorf("%w: auto_pad %q", ErrModel, ap)
	}
	if pads[0] != pads[2] || pads[1] != pads[3] {
		return nil, fmt.Errorf("%w: Conv with asymmetric pads %v; only symmetric padding is supported", ErrUnsupported, pads)
	}
	for _, p := range pads {
		if p < 0 {
			return nil, fmt.Errorf("%w: negative pads %v", ErrModel, pads)
		}
	}
	for d := range 2 {
		if sx[2+d]+2*pads[d] < dil[d]*(sw[2+d]-1)+1 {
			return nil, fmt.Errorf("%w: Conv kernel %v larger than the padded input %v", ErrShape, sw, sx)
		}
	}
	y, err := G.Conv2d(x, w, tensor.Shape{sw[2], sw[3]}, []int{pads[0], pads[1]}, strides, dil)
	if err != nil {
		return nil, err
	}
	if !n.has(2) {
		return one(y, nil)
	}
	if s := n.in[2].shape(); len(s) != 1 || s[0] != sw[0] {
		return nil, fmt.Errorf("%w: Conv bias of shape %v for %d output channels", ErrShape, s, sw[0])
	}
	bias, err := b.toNode(n.in[2])
	if err != nil {
		return nil, err
	}
	if bias, err = reshape(bias, []int{1, sw[0], 1, 1}); err != nil {
		return nil, err
	}
	if bias, err = b.broadcastTo(bias, []int(y.Shape())); err != nil {
		return nil, err
	}
	return one(G.Add(y, bias))
}

// reshapeValue gives v a new shape of the same size, folding constants.
func reshapeValue(v value, shape []int) ([]value, error) {
	if v.c != nil {
		if v.c.size() != product(shape) {
			return nil, fmt.Errorf("%w: cannot reshape %v to %v", ErrShape, v.c.shape, shape)
		}
		c := *v.c
		c.shape = slices.Clone(shape)
		return []value{{c: &c}}, nil
	}
	return one(reshape(v.n, shape))
}

func buildFlatten(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	s := n.in[0].shape()
	a := n.attrInt("axis", 1)
	if a < 0 {
		a += int64(len(s))
	}
	if a < 0 || a > int64(len(s)) {
		return nil, fmt.Errorf("%w: Flatten axis %d for rank %d", ErrShape, n.attrInt("axis", 1), len(s))
	}
	return reshapeValue(n.in[0], []int{product(s[:a]), product(s[a:])})
}

// constInput returns input k as integers; it must be a constant.
func constInput(n *onode, k int, what string) ([]int64, error) {
	if !n.has(k) {
		return nil, fmt.Errorf("%w: %s (input %d) is missing", ErrModel, what, k)
	}
	if n.in[k].c == nil {
		return nil, fmt.Errorf("%w: %s (input %d) is computed at run time; only constant %s (initializers, Constant nodes, shape arithmetic) are supported",
			ErrUnsupported, what, k, what)
	}
	return n.in[k].c.ints(), nil
}

func buildReshape(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 2); err != nil {
		return nil, err
	}
	spec, err := constInput(n, 1, "shape")
	if err != nil {
		return nil, err
	}
	in := n.in[0].shape()
	allowZero := n.attrInt("allowzero", 0) != 0
	out := make([]int, len(spec))
	infer := -1
	for k, d := range spec {
		switch {
		case d == 0 && !allowZero:
			if k >= len(in) {
				return nil, fmt.Errorf("%w: Reshape copies dimension %d of %v", ErrShape, k, in)
			}
			out[k] = in[k]
		case d == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("%w: Reshape to %v infers two dimensions", ErrShape, spec)
			}
			infer = k
			out[k] = 1
		case d < 0:
			return nil, fmt.Errorf("%w: Reshape to %v", ErrShape, spec)
		default:
			out[k] = int(d)
		}
	}
	if infer >= 0 {
		rest := product(out)
		if rest == 0 || product(in)%rest != 0 {
			return nil, fmt.Errorf("%w: cannot reshape %v to %v", ErrShape, in, spec)
		}
		out[infer] = product(in) / rest
	}
	return reshapeValue(n.in[0], out)
}

func buildConcat(b *builder, n *onode) ([]value, error) {
	if len(n.in) == 0 {
		return nil, fmt.Errorf("%w: Concat without inputs", ErrModel)
	}
	rank := len(n.in[0].shape())
	ax, err := axis(n.attrInt("axis", 0), rank)
	if err != nil {
		return nil, err
	}
	allConst := true
	for k, v := range n.in {
		if !n.has(k) {
			return nil, fmt.Errorf("%w: Concat input %d is missing", ErrModel, k)
		}
		s := v.shape()
		if len(s) != rank {
			return nil, fmt.Errorf("%w: Concat of ranks %d and %d", ErrShape, rank, len(s))
		}
		for d := range s {
			if d != ax && s[d] != n.in[0].shape()[d] {
				return nil, fmt.Errorf("%w: Concat of %v and %v along axis %d", ErrShape, n.in[0].shape(), s, ax)
			}
		}
		allConst = allConst && v.c != nil
	}
	if allConst {
		cs := make([]*constant, len(n.in))
		for k, v := range n.in {
			cs[k] = v.c
		}
		return []value{{c: foldConcat(cs, ax)}}, nil
	}
	nodes := make(G.Nodes, 0, len(n.in))
	for _, v := range n.in {
		if product(v.shape()) == 0 {
			continue
		}
		x, err := b.toNode(v)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, x)
	}
	if len(nodes) == 1 {
		return one(nodes[0], nil)
	}
	return one(G.Concat(ax, nodes...))
}

func buildConstant(b *builder, n *onode) ([]value, error) {
	if len(n.GetAttribute()) != 1 {
		return nil, fmt.Errorf("%w: Constant needs exactly one value attribute", ErrModel)
	}
	a := n.GetAttribute()[0]
	var c *constant
	switch a.GetName() {
	case "value":
		var err error
		if c, err = decodeTensor(a.GetT()); err != nil {
			return nil, err
		}
	case "value_float":
		c = &constant{f: []float64{float64(a.GetF())}}
	case "value_floats":
		c = &constant{shape: []int{len(a.GetFloats())}}
		for _, v := range a.GetFloats() {
			c.f = append(c.f, float64(v))
		}
	case "value_int":
		c = &constant{isInt: true, i: []int64{a.GetI()}}
	case "value_ints":
		c = &constant{isInt: true, shape: []int{len(a.GetInts())}, i: slices.Clone(a.GetInts())}
	default:
		return nil, fmt.Errorf("%w: Constant with attribute %q", ErrUnsupported, a.GetName())
	}
	return []value{{c: c}}, nil
}

// axesOf reads Unsqueeze/Squeeze axes: an attribute before opset 13, input 1 from 13 on.
func axesOf(b *builder, n *onode) ([]int64, bool, error) {
	if b.m.opset < 13 {
		v, ok := n.attrInts("axes")
		return v, ok, nil
	}
	if !n.has(1) {
		return nil, false, nil
	}
	v, err := constInput(n, 1, "axes")
	return v, true, err
}

func buildUnsqueeze(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 2); err != nil {
		return nil, err
	}
	axes, ok, err := axesOf(b, n)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: Unsqueeze without axes", ErrModel)
	}
	in := n.in[0].shape()
	rank := len(in) + len(axes)
	ins := make([]bool, rank)
	for _, a := range axes {
		ax, err := axis(a, rank)
		if err != nil {
			return nil, err
		}
		if ins[ax] {
			return nil, fmt.Errorf("%w: Unsqueeze axis %d repeated", ErrModel, a)
		}
		ins[ax] = true
	}
	out := make([]int, 0, rank)
	k := 0
	for d := range rank {
		if ins[d] {
			out = append(out, 1)
		} else {
			out = append(out, in[k])
			k++
		}
	}
	return reshapeValue(n.in[0], out)
}

func buildSqueeze(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 2); err != nil {
		return nil, err
	}
	axes, ok, err := axesOf(b, n)
	if err != nil {
		return nil, err
	}
	in := n.in[0].shape()
	drop := make([]bool, len(in))
	if !ok {
		for d, s := range in {
			drop[d] = s == 1
		}
	}
	for _, a := range axes {
		ax, err := axis(a, len(in))
		if err != nil {
			return nil, err
		}
		if in[ax] != 1 {
			return nil, fmt.Errorf("%w: Squeeze axis %d of %v is not 1", ErrShape, a, in)
		}
		drop[ax] = true
	}
	var out []int
	for d, s := range in {
		if !drop[d] {
			out = append(out, s)
		}
	}
	return reshapeValue(n.in[0], out)
}

func buildShape(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	s := n.in[0].shape()
	r := int64(len(s))
	clamp := func(v int64) int64 {
		if v < 0 {
			v += r
		}
		return min(max(v, 0), r)
	}
	start, end := clamp(n.attrInt("start", 0)), clamp(n.attrInt("end", r))
	c := &constant{isInt: true, shape: []int{0}}
	for _, d := range s[start:max(start, end)] {
		c.i = append(c.i, int64(d))
	}
	c.shape[0] = len(c.i)
	return []value{{c: c}}, nil
}

func buildExpand(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 2); err != nil {
		return nil, err
	}
	spec, err := constInput(n, 1, "shape")
	if err != nil {
		return nil, err
	}
	want := make([]int, len(spec))
	for k, d := range spec {
		if d < 0 || d > maxElements {
			return nil, fmt.Errorf("%w: Expand to %v", ErrShape, spec)
		}
		want[k] = int(d)
	}
	out, err := broadcastShape(n.in[0].shape(), want)
	if err != nil {
		return nil, err
	}
	if c := n.in[0].c; c != nil {
		return []value{{c: foldBroadcast(c, out)}}, nil
	}
	return one(b.broadcastTo(n.in[0].n, out))
}

// foldBroadcast repeats c to shape out (out is a valid broadcast of c's shape).
func foldBroadcast(c *constant, out []int) *constant {
	res := &constant{isInt: c.isInt, shape: slices.Clone(out)}
	idx := broadcastIndex(c.shape, out)
	for i := range product(out) {
		src := i
		if idx != nil {
			src = idx[i]
		}
		if c.isInt {
			res.i = append(res.i, c.i[src])
		} else {
			res.f = append(res.f, c.f[src])
		}
	}
	return res
}

func foldBinary(kind string, x, y *constant) (*constant, error) {
	out, err := broadcastShape(x.shape, y.shape)
	if err != nil {
		return nil, err
	}
	x, y = foldBroadcast(x, out), foldBroadcast(y, out)
	res := &constant{shape: out, isInt: x.isInt && y.isInt}
	if res.isInt {
		for k := range x.i {
			a, b := x.i[k], y.i[k]
			switch kind {
			case "Add":
				res.i = append(res.i, a+b)
			case "Sub":
				res.i = append(res.i, a-b)
			case "Mul":
				res.i = append(res.i, a*b)
			default:
				if b == 0 {
					return nil, fmt.Errorf("%w: integer division by zero", ErrModel)
				}
				res.i = append(res.i, a/b)
			}
		}
		return res, nil
	}
	xf, yf := x.floats(), y.floats()
	for k := range xf {
		a, b := xf[k], yf[k]
		switch kind {
		case "Add":
			res.f = append(res.f, a+b)
		case "Sub":
			res.f = append(res.f, a-b)
		case "Mul":
			res.f = append(res.f, a*b)
		default:
			res.f = append(res.f, a/b)
		}
	}
	return res, nil
}

func foldConcat(cs []*constant, ax int) *constant {
	out := &constant{isInt: true, shape: slices.Clone(cs[0].shape)}
	out.shape[ax] = 0
	for _, c := range cs {
		out.shape[ax] += c.shape[ax]
		out.isInt = out.isInt && c.isInt
	}
	outer := product(cs[0].shape[:ax])
	for o := range outer {
		for _, c := range cs {
			chunk := product(c.shape[ax:])
			if out.isInt {
				out.i = append(out.i, c.i[o*chunk:(o+1)*chunk]...)
			} else {
				out.f = append(out.f, c.floats()[o*chunk:(o+1)*chunk]...)
			}
		}
	}
	return out
}

// buildIf inlines the branch its condition selects. The condition must be known when the
// graph is built (exporters test shapes, which are static once the batch is fixed).
func buildIf(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 1, 1); err != nil {
		return nil, err
	}
	cond := n.in[0].c
	if cond == nil {
		return nil, fmt.Errorf("%w: If whose condition is computed at run time; only conditions known when the graph is built (shape tests) are supported", ErrUnsupported)
	}
	if cond.size() != 1 {
		return nil, fmt.Errorf("%w: If condition of shape %v; want one element", ErrShape, cond.shape)
	}
	name := "else_branch"
	if cond.floats()[0] != 0 {
		name = "then_branch"
	}
	a := n.attr(name)
	if a == nil || a.GetG() == nil {
		return nil, fmt.Errorf("%w: If without %s", ErrModel, name)
	}
	sg := a.GetG()
	if len(sg.GetOutput()) != len(n.GetOutput()) {
		return nil, fmt.Errorf("%w: If %s has %d outputs, the node %d", ErrModel, name, len(sg.GetOutput()), len(n.GetOutput()))
	}
	if b.depth >= maxSubgraphDepth {
		return nil, fmt.Errorf("%w: If nested deeper than %d", ErrUnsupported, maxSubgraphDepth)
	}
	b.depth++
	defer func() { b.depth-- }()
	for _, t := range sg.GetInitializer() {
		c, err := decodeTensor(t)
		if err != nil {
			return nil, err
		}
		b.env[t.GetName()] = value{c: c}
	}
	for k, sn := range sg.GetNode() {
		for _, in := range sn.GetInput() {
			if _, ok := b.env[in]; !ok && in != "" {
				return nil, fmt.Errorf("%w: %s node %q reads %q, which is not defined", ErrModel, name, refOf(sn, k).name, in)
			}
		}
		if err := b.node(sn, refOf(sn, k)); err != nil {
			return nil, err
		}
	}
	b.at = n.ref
	out := make([]value, len(sg.GetOutput()))
	for k, vi := range sg.GetOutput() {
		v, ok := b.env[vi.GetName()]
		if !ok {
			return nil, fmt.Errorf("%w: If %s output %q is never computed", ErrModel, name, vi.GetName())
		}
		out[k] = v
	}
	return out, nil
}
