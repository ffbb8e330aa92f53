package graph

import (
	"fmt"
	"math"
	"slices"

	G "gorgonia.org/gorgonia"
)

// LayerNormalization (opset 17) and the recurrent layers LSTM, GRU and RNN.

// buildLayerNorm normalises over the axes from `axis` on (mean 0, variance 1, with epsilon
// added to the variance), then scales and shifts: Y = norm(X)·Scale + B. The Mean and
// InvStdDev outputs are not supported.
func buildLayerNorm(b *builder, n *onode) ([]value, error) {
	if err := arity(n, 2, 3); err != nil {
		return nil, err
	}
	for _, o := range n.GetOutput()[1:] {
		if o != "" {
			return nil, fmt.Errorf("%w: LayerNormalization's Mean and InvStdDev outputs (%q); only Y is supported", ErrUnsupported, o)
		}
	}
	in := n.in[0].shape()
	ax, err := axis(n.attrInt("axis", -1), len(in))
	if err != nil {
		return nil, err
	}
	eps := float64(n.attrFloat("epsilon", 1e-5))
	inner := product(in[ax:])
	rows := product(in[:ax])
	if inner == 0 {
		return nil, fmt.Errorf("%w: LayerNormalization over an empty axis of %v", ErrShape, in)
	}
	// norm: per row, (x - mean) / sqrt(var + eps); its gradient
	// dx = (dn - mean(dn) - n·mean(dn·n)) / sqrt(var + eps).
	stats := func(x []float64, r int) (mean, inv float64) {
		row := x[r*inner : (r+1)*inner]
		for _, v := range row {
			mean += v
		}
		mean /= float64(inner)
		vr := 0.0
		for _, v := range row {
			vr += (v - mean) * (v - mean)
		}
		return mean, 1 / math.Sqrt(vr/float64(inner)+eps)
	}
	spec := fnSpec{desc: fmt.Sprintf("LayerNorm{%d,%g}", ax, eps), shape: slices.Clone(in),
		fwd: func(x [][]float64, y []float64) error {
			for r := range rows {
				mean, inv := stats(x[0], r)
				for k := r * inner; k < (r+1)*inner; k++ {
					y[k] = (x[0][k] - mean) * inv
				}
			}
			return nil
		},
		grads: []gradFn{func(x [][]float64, y, dy, dx []float64) {
			for r := range rows {
				_, inv := stats(x[0], r)
				lo, hi := r*inner, (r+1)*inner
				md, mdn := 0.0, 0.0
				for k := lo; k < hi; k++ {
					md += dy[k]
					mdn += dy[k] * y[k]
				}
				md /= float64(inner)
				mdn /= float64(inner)
				for k := lo; k < hi; k++ {
					dx[k] = (dy[k] - md - y[k]*mdn) * inv
				}
			}
		}},
	}
	normed, err := b.fn(spec, n.in[0])
	if err != nil {
		return nil, err
	}
	args := []value{normed, n.in[1]}
	f := func(a []float64) float64 { return a[0] * a[1] }
	derivs := []elemDeriv{
		func(a []float64, _ float64) float64 { return a[1] },
		func(a []float64, _ float64) float64 { return a[0] },
	}
	if n.has(2) {
		args = append(args, n.in[2])
		f = func(a []float64) float64 { return a[0]*a[1] + a[2] }
		derivs = append(derivs, func([]float64, float64) float64 { return 1 })
	}
	for k := 1; k < len(args); k++ {
		if s, err := broadcastShape(in, args[k].shape()); err != nil || !slices.Equal(s, in) {
			return nil, fmt.Errorf("%w: LayerNormalization input %d of shape %v does not broadcast to %v", ErrShape, k, args[k].shape(), in)
		}
	}
	return b.applyElementwise(fmt.Sprintf("ScaleShift%d", len(args)), args, f, derivs, false)
}

// rnn holds what the three recurrent layers share: ONNX semantics, layout 0 ([seq, batch,
// input]) or 1 ([batch, seq, input]), forward, reverse or bidirectional, unrolled over the
// whole sequence so gradients flow through time.
type rnn struct {
	b                 *builder
	n                 *onode
	gates             int // 4 (LSTM), 3 (GRU), 1 (RNN)
	seq, batch, input int
	hidden, dirs      int
	layout            int64
}

func (b *builder) newRNN(n *onode, gates int) (*rnn, error) {
	if err := arity(n, 3, 8); err != nil {
		return nil, err
	}
	r := &rnn{b: b, n: n, gates: gates, layout: n.attrInt("layout", 0)}
	xs := n.in[0].shape()
	if len(xs) != 3 {
		return nil, fmt.Errorf("%w: %s input of shape %v; want [seq, batch, input]", ErrShape, n.GetOpType(), xs)
	}
	switch r.layout {
	case 0:
		r.seq, r.batch, r.input = xs[0], xs[1], xs[2]
	case 1:
		r.batch, r.seq, r.input = xs[0], xs[1], xs[2]
	default:
		return nil, fmt.Errorf("%w: %s layout %d", ErrModel, n.GetOpType(), r.layout)
	}
	switch dir := n.attrString("direction", "forward"); dir {
	case "forward", "reverse":
		r.dirs = 1
	case "bidirectional":
		r.dirs = 2
	default:
		return nil, fmt.Errorf("%w: %s direction %q", ErrModel, n.GetOpType(), dir)
	}
	ws := n.in[1].shape()
	if len(ws) != 3 || ws[0] != r.dirs || ws[1]%gates != 0 || ws[2] != r.input {
		return nil, fmt.Errorf("%w: %s W of shape %v for input %v", ErrShape, n.GetOpType(), ws, xs)
	}
	r.hidden = ws[1] / gates
	if h := n.attrInt("hidden_size", int64(r.hidden)); h != int64(r.hidden) {
		return nil, fmt.Errorf("%w: %s hidden_size %d, W holds %d", ErrShape, n.GetOpType(), h, r.hidden)
	}
	if rs := n.in[2].shape(); !slices.Equal(rs, []int{r.dirs, gates * r.hidden, r.hidden}) {
		return nil, fmt.Errorf("%w: %s R of shape %v; want %v", ErrShape, n.GetOpType(), rs, []int{r.dirs, gates * r.hidden, r.hidden})
	}
	if n.has(3) {
		if bs := n.in[3].shape(); !slices.Equal(bs, []int{r.dirs, 2 * gates * r.hidden}) {
			return nil, fmt.Errorf("%w: %s B of shape %v; want %v", ErrShape, n.GetOpType(), bs, []int{r.dirs, 2 * gates * r.hidden})
		}
	}
	if a := n.attr("clip"); a != nil {
		return nil, fmt.Errorf("%w: %s with clip %g; cell clipping is not supported", ErrUnsupported, n.GetOpType(), a.GetF())
	}
	if n.attrInt("input_forget", 0) != 0 {
		return nil, fmt.Errorf("%w: LSTM with input_forget", ErrUnsupported)
	}
	if a := n.attr("activations"); a != nil {
		def := map[int][]string{4: {"Sigmoid", "Tanh", "Tanh"}, 3: {"Sigmoid", "Tanh"}, 1: {"Tanh"}}[gates]
		for k, s := range a.GetStrings() {
			if string(s) != def[k%len(def)] {
				return nil, fmt.Errorf("%w: %s activations %q; only the defaults %v are supported", ErrUnsupported, n.GetOpType(), a.GetStrings(), def)
			}
		}
	}
	if n.has(4) {
		if c := n.in[4].c; c != nil {
			for _, l := range c.ints() {
				if l != int64(r.seq) {
					return nil, fmt.Errorf("%w: %s sequence_lens %v shorter than the sequence (%d); only full sequences are supported",
						ErrUnsupported, n.GetOpType(), c.ints(), r.seq)
				}
			}
		}
		// A sequence_lens fed at run time is taken to be full: every row runs all seq steps.
	}
	return r, nil
}

// dirSlice returns v's part for direction d as a node of shape rest: v[d] of [dirs, ...].
func (r *rnn) dirSlice(v value, d int, rest ...int) (*G.Node, error) {
	s := v.shape()
	pick := make([][]int, len(s))
	for k := range s {
		pick[k] = allOf(s[k])
	}
	pick[0] = []int{d}
	p, err := r.b.pick(fmt.Sprintf("dir%d", d), v, pick)
	if err != nil {
		return nil, err
	}
	vs, err := reshapeValue(p[0], rest)
	if err != nil {
		return nil, err
	}
	return r.b.toNode(vs[0])
}

// state returns the initial state (input k: initial_h or initial_c) of direction d as
// [batch, hidden], zeros when absent.
func (r *rnn) state(k, d int) (*G.Node, error) {
	if !r.n.has(k) {
		return r.b.toNode(value{c: &constant{shape: []int{r.batch, r.hidden}, f: make([]float64, r.batch*r.hidden)}})
	}
	v := r.n.in[k]
	want := []int{r.dirs, r.batch, r.hidden}
	if r.layout == 1 {
		want = []int{r.batch, r.dirs, r.hidden}
	}
	if !slices.Equal(v.shape(), want) {
		return nil, fmt.Errorf("%w: %s state input %d of shape %v; want %v", ErrShape, r.n.GetOpType(), k, v.shape(), want)
	}
	if r.layout == 1 {
		s := v.shape()
		pick := [][]int{allOf(s[0]), {d}, allOf(s[2])}
		p, err := r.b.pick(fmt.Sprintf("state%d", d), v, pick)
		if err != nil {
			return nil, err
		}
		vs, err := reshapeValue(p[0], []int{r.batch, r.hidden})
		if err != nil {
			return nil, err
		}
		return r.b.toNode(vs[0])
	}
	return r.dirSlice(v, d, r.batch, r.hidden)
}

// cols returns columns [lo, hi) of a matrix.
func (r *rnn) cols(x *G.Node, lo, hi int) (*G.Node, error) {
	s := []int(x.Shape())
	p, err := r.b.pick(fmt.Sprintf("cols%d:%d", lo, hi), value{n: x}, [][]int{allOf(s[0]), allOf(hi)[lo:]})
	if err != nil {
		return nil, err
	}
	return p[0].n, nil
}

// rows returns rows [lo, hi) of a matrix.
func (r *rnn) rows(x *G.Node, lo, hi int) (*G.Node, error) {
	s := []int(x.Shape())
	p, err := r.b.pick(fmt.Sprintf("rows%d:%d", lo, hi), value{n: x}, [][]int{allOf(hi)[lo:], allOf(s[1])})
	if err != nil {
		return nil, err
	}
	return p[0].n, nil
}

// weights are one direction's matrices, transposed for x·Wᵀ: W [input, G·H], R [hidden,
// G·H], and the biases [1, G·H] (nil when B is absent).
type weights struct {
	w, r, wb, rb *G.Node
}

func (r *rnn) weights(d int) (weights, error) {
	var ws weights
	gh := r.gates * r.hidden
	w, err := r.dirSlice(r.n.in[1], d, gh, r.input)
	if err != nil {
		return ws, err
	}
	if ws.w, err = G.Transpose(w, 1, 0); err != nil {
		return ws, err
	}
	rr, err := r.dirSlice(r.n.in[2], d, gh, r.hidden)
	if err != nil {
		return ws, err
	}
	if ws.r, err = G.Transpose(rr, 1, 0); err != nil {
		return ws, err
	}
	if r.n.has(3) {
		bias, err := r.dirSlice(r.n.in[3], d, 1, 2*gh)
		if err != nil {
			return ws, err
		}
		if ws.wb, err = r.cols(bias, 0, gh); err != nil {
			return ws, err
		}
		if ws.rb, err = r.cols(bias, gh, 2*gh); err != nil {
			return ws, err
		}
	}
	return ws, nil
}

// affine is x·w + bias (bias [1, n] broadcast over the rows, or nil).
func (r *rnn) affine(x, w, bias *G.Node) (*G.Node, error) {
	y, err := G.Mul(x, w)
	if err != nil {
		return nil, err
	}
	if bias == nil {
		return y, nil
	}
	bb, err := r.b.broadcastTo(bias, []int(y.Shape()))
	if err != nil {
		return nil, err
	}
	return G.Add(y, bb)
}

// inputs returns X as [seq·batch, input] with rows in (time, batch) order.
func (r *rnn) inputs() (*G.Node, error) {
	x := r.n.in[0]
	if r.layout == 1 {
		v, err := r.b.transpose(x, []int64{1, 0, 2})
		if err != nil {
			return nil, err
		}
		x = v
	}
	vs, err := reshapeValue(x, []int{r.seq * r.batch, r.input})
	if err != nil {
		return nil, err
	}
	return r.b.toNode(vs[0])
}

// step computes one time step of one direction: the new hidden state and (LSTM) cell state.
type stepFn func(gx, h, c *G.Node, ws weights, d int) (hNew, cNew *G.Node, err error)

// run unrolls the layer and returns its outputs: Y, Y_h and (LSTM) Y_c.
func (r *rnn) run(step stepFn, cell bool) ([]value, error) {
	x, err := r.inputs()
	if err != nil {
		return nil, err
	}
	dirOut := make([][]*G.Node, r.dirs) // per direction, H_t in time order
	lastH := make([]*G.Node, r.dirs)
	lastC := make([]*G.Node, r.dirs)
	reverse := r.n.attrString("direction", "forward") == "reverse"
	for d := range r.dirs {
		ws, err := r.weights(d)
		if err != nil {
			return nil, err
		}
		xw, err := r.affine(x, ws.w, ws.wb)
		if err != nil {
			return nil, err
		}
		h, err := r.state(5, d)
		if err != nil {
			return nil, err
		}
		var c *G.Node
		if cell {
			if c, err = r.state(6, d); err != nil {
				return nil, err
			}
		}
		dirOut[d] = make([]*G.Node, r.seq)
		for k := range r.seq {
			t := k
			if reverse || d == 1 {
				t = r.seq - 1 - k
			}
			gx, err := r.rows(xw, t*r.batch, (t+1)*r.batch)
			if r.seq == 1 {
				gx, err = xw, nil
			}
			if err != nil {
				return nil, err
			}
			if h, c, err = step(gx, h, c, ws, d); err != nil {
				return nil, err
			}
			dirOut[d][t] = h
		}
		lastH[d], lastC[d] = h, c
	}
	// Y: [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs, hidden] (layout 1).
	var steps []*G.Node
	for t := range r.seq {
		var parts []*G.Node
		for d := range r.dirs {
			p, err := reshape(dirOut[d][t], []int{1, 1, r.batch, r.hidden})
			if err != nil {
				return nil, err
			}
			parts = append(parts, p)
		}
		if len(parts) > 1 {
			p, err := G.Concat(1, parts...)
			if err != nil {
				return nil, err
			}
			parts = []*G.Node{p}
		}
		steps = append(steps, parts[0])
	}
	y := steps[0]
	if len(steps) > 1 {
		if y, err = G.Concat(0, steps...); err != nil {
			return nil, err
		}
	}
	stack := func(ns []*G.Node) (*G.Node, error) {
		parts := make([]*G.Node, len(ns))
		for d, h := range ns {
			if parts[d], err = reshape(h, []int{1, r.batch, r.hidden}); err != nil {
				return nil, err
			}
		}
		if len(parts) == 1 {
			return parts[0], nil
		}
		return G.Concat(0, parts...)
	}
	yh, err := stack(lastH)
	if err != nil {
		return nil, err
	}
	out := []value{{n: y}, {n: yh}}
	if cell {
		yc, err := stack(lastC)
		if err != nil {
			return nil, err
		}
		out = append(out, value{n: yc})
	}
	if r.layout == 1 {
		// [seq, dirs, batch, hidden] → [batch, seq, dirs, hidden]; states [dirs, batch, hidden]
		// → [batch, dirs, hidden].
		perms := [][]int64{{2, 0, 1, 3}, {1, 0, 2}, {1, 0, 2}}
		for k := range out {
			t, err := r.b.transpose(out[k], perms[k])
			if err != nil {
				return nil, err
			}
			out[k] = t
		}
	}
	return out, nil
}

func (r *rnn) peephole(d, k int) (*G.Node, error) {
	if !r.n.has(7) {
		return nil, nil
	}
	if s := r.n.in[7].shape(); !slices.Equal(s, []int{r.dirs, 3 * r.hidden}) {
		return nil, fmt.Errorf("%w: LSTM P of shape %v; want %v", ErrShape, s, []int{r.dirs, 3 * r.hidden})
	}
	p, err := r.dirSlice(r.n.in[7], d, 1, 3*r.hidden)
	if err != nil {
		return nil, err
	}
	if p, err = r.cols(p, k*r.hidden, (k+1)*r.hidden); err != nil {
		return nil, err
	}
	return r.b.broadcastTo(p, []int{r.batch, r.hidden})
}

func addPeep(x, p, c *G.Node) (*G.Node, error) {
	if p == nil {
		return x, nil
	}
	pc, err := G.HadamardProd(p, c)
	if err != nil {
		return nil, err
	}
	return G.Add(x, pc)
}

// buildLSTM: gates i, o, f, c in that order (iofc); C = f⊙C + i⊙tanh(c̃); H = o⊙tanh(C).
func buildLSTM(b *builder, n *onode) ([]value, error) {
	r, err := b.newRNN(n, 4)
	if err != nil {
		return nil, err
	}
	H := r.hidden
	return r.run(func(gx, h, c *G.Node, ws weights, d int) (*G.Node, *G.Node, error) {
		gh, err := r.affine(h, ws.r, ws.rb)
		if err != nil {
			return nil, nil, err
		}
		g, err := G.Add(gx, gh)
		if err != nil {
			return nil, nil, err
		}
		gate := func(k int) (*G.Node, error) { return r.cols(g, k*H, (k+1)*H) }
		must := func(n *G.Node, err error) *G.Node {
			if err != nil {
				panic(err)
			}
			return n
		}
		pi, err := r.peephole(d, 0)
		if err != nil {
			return nil, nil, err
		}
		po := must(r.peephole(d, 1))
		pf := must(r.peephole(d, 2))
		i := must(G.Sigmoid(must(addPeep(must(gate(0)), pi, c))))
		f := must(G.Sigmoid(must(addPeep(must(gate(2)), pf, c))))
		cc := must(G.Tanh(must(gate(3))))
		cNew := must(G.Add(must(G.HadamardProd(f, c)), must(G.HadamardProd(i, cc))))
		o := must(G.Sigmoid(must(addPeep(must(gate(1)), po, cNew))))
		hNew := must(G.HadamardProd(o, must(G.Tanh(cNew))))
		return hNew, cNew, nil
	}, true)
}

// buildGRU: gates z, r, h (zrh); with linear_before_reset the reset gate multiplies
// (H·Rhᵀ + Rbh), else it multiplies H before the product. H = (1-z)⊙h̃ + z⊙H.
func buildGRU(b *builder, n *onode) ([]value, error) {
	r, err := b.newRNN(n, 3)
	if err != nil {
		return nil, err
	}
	H := r.hidden
	lbr := n.attrInt("linear_before_reset", 0) != 0
	must := func(n *G.Node, err error) *G.Node {
		if err != nil {
			panic(err)
		}
		return n
	}
	return r.run(func(gx, h, _ *G.Node, ws weights, d int) (*G.Node, *G.Node, error) {
		var rb [3]*G.Node // the recurrent bias per gate, or nil
		if ws.rb != nil {
			for k := range rb {
				rb[k] = must(r.cols(ws.rb, k*H, (k+1)*H))
			}
		}
		rw := [3]*G.Node{must(r.cols(ws.r, 0, H)), must(r.cols(ws.r, H, 2*H)), must(r.cols(ws.r, 2*H, 3*H))}
		z := must(G.Sigmoid(must(G.Add(must(r.cols(gx, 0, H)), must(r.affine(h, rw[0], rb[0]))))))
		rs := must(G.Sigmoid(must(G.Add(must(r.cols(gx, H, 2*H)), must(r.affine(h, rw[1], rb[1]))))))
		var hh *G.Node
		if lbr {
			hh = must(G.HadamardProd(rs, must(r.affine(h, rw[2], rb[2]))))
		} else {
			hh = must(r.affine(must(G.HadamardProd(rs, h)), rw[2], rb[2]))
		}
		cand := must(G.Tanh(must(G.Add(must(r.cols(gx, 2*H, 3*H)), hh))))
		// (1-z)⊙h̃ + z⊙H = h̃ + z⊙(H - h̃)
		hNew := must(G.Add(cand, must(G.HadamardProd(z, must(G.Sub(h, cand))))))
		return hNew, nil, nil
	}, false)
}

// buildRNN: H = tanh(X·Wᵀ + H·Rᵀ + Wb + Rb).
func buildRNN(b *builder, n *onode) ([]value, error) {
	r, err := b.newRNN(n, 1)
	if err != nil {
		return nil, err
	}
	return r.run(func(gx, h, _ *G.Node, ws weights, d int) (*G.Node, *G.Node, error) {
		gh, err := r.affine(h, ws.r, ws.rb)
		if err != nil {
			return nil, nil, err
		}
		s, err := G.Add(gx, gh)
		if err != nil {
			return nil, nil, err
		}
		hNew, err := G.Tanh(s)
		return hNew, nil, err
	}, false)
}
