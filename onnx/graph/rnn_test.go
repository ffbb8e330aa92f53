package graph

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// permute returns vals (of shape in) with axes permuted.
func permute(t *testing.T, vals []float64, in []int, perm []int) []float64 {
	t.Helper()
	p := make([]int64, len(perm))
	for k, v := range perm {
		p[k] = int64(v)
	}
	_, idx, err := permuteIndex(in, p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(idx))
	for i, j := range idx {
		out[i] = vals[j]
	}
	return out
}

// TestLSTMLayout1: ONNX Runtime has no batch-major (layout 1) LSTM or GRU, so the layout-1
// graphs are checked against the layout-0 ones (checked against ONNX Runtime in
// TestCoverageAgainstORT) on the transposed data, and by finite differences.
func TestRecurrentLayout1(t *testing.T) {
	for _, name := range []string{"lstm", "gru_linear_before_reset"} {
		t.Run(name, func(t *testing.T) {
			c0 := coverageCases()[name]
			c1 := c0
			c1.nodes = []*onnxpb.NodeProto{proto1(c0.nodes[0])}
			c1.nodes[0].Attribute = append(c1.nodes[0].Attribute, aInt("layout", 1))
			// X [seq, batch, in] → [batch, seq, in]; states [dirs, batch, h] → [batch, dirs, h];
			// Y [seq, dirs, batch, h] → [batch, seq, dirs, h].
			perms := map[int][]int{3: {1, 0, 2}, 4: {2, 0, 1, 3}}
			c1.inputs, c1.outputs = nil, nil
			shapeOf := func(p port) []int { return p.concrete(1) }
			for _, p := range c0.inputs {
				q := p
				q.shape = make([]int64, len(p.shape))
				for k, j := range perms[3] {
					q.shape[k] = p.shape[j]
				}
				c1.inputs = append(c1.inputs, q)
			}
			for _, p := range c0.outputs {
				q := p
				q.shape = make([]int64, len(p.shape))
				for k, j := range perms[len(p.shape)] {
					q.shape[k] = p.shape[j]
				}
				c1.outputs = append(c1.outputs, q)
			}
			feeds0 := c0.feeds(1)
			feeds1 := make([][]float64, len(feeds0))
			for k, p := range c0.inputs {
				feeds1[k] = permute(t, feeds0[k], shapeOf(p), perms[3])
			}
			run := func(c opCase, feeds [][]float64) [][]float64 {
				m, err := Parse(c.bytes(t))
				if err != nil {
					t.Fatal(err)
				}
				gr := buildCase(t, m, c, m.NewParams(), 1, nil)
				var ins []*tensor.Dense
				for k, in := range c.inputs {
					ins = append(ins, denseOf(tensor.Float32, in.concrete(1), feeds[k]))
				}
				return forward(t, gr, ins...)
			}
			want, got := run(c0, feeds0), run(c1, feeds1)
			for k, p := range c0.outputs {
				w := permute(t, want[k], shapeOf(p), perms[len(p.shape)])
				for i := range w {
					if math.Abs(w[i]-got[k][i]) > 1e-6 {
						t.Fatalf("output %s[%d]: layout 1 %g, layout 0 %g", p.name, i, got[k][i], w[i])
					}
				}
			}
			m, err := Parse(c1.bytes(t))
			if err != nil {
				t.Fatal(err)
			}
			var outs []string
			for _, o := range c1.outputs {
				outs = append(outs, o.name)
			}
			checkGradients(t, m, c1, 1, feeds1, outs)
		})
	}
}

func proto1(n *onnxpb.NodeProto) *onnxpb.NodeProto {
	return proto.Clone(n).(*onnxpb.NodeProto)
}

// TestRecurrentLimits: sequence_lens shorter than the sequence, cell clipping and other
// activations are refused with ErrUnsupported; full constant sequence_lens and run-time ones
// are accepted (taken as full).
func TestRecurrentLimits(t *testing.T) {
	base := coverageCases()["lstm"]
	build := func(c opCase) error {
		m, err := Parse(c.bytes(t))
		if err != nil {
			return err
		}
		shapes := map[string][]int{}
		for _, in := range c.inputs {
			shapes[in.name] = in.concrete(3)
		}
		_, err = m.BuildWith(G.NewGraph(), m.NewParams(), BuildOptions{Batch: 3, Shapes: shapes})
		return err
	}
	with := func(seqLens *onnxpb.TensorProto, attrs ...*onnxpb.AttributeProto) opCase {
		c := base
		n := proto1(base.nodes[0])
		n.Attribute = append(n.Attribute, attrs...)
		c.inits = append(append([]*onnxpb.TensorProto(nil), base.inits...), seqLens)
		n.Input = []string{"X", "W", "R", "B", seqLens.GetName(), "h0", "c0"}
		c.nodes = []*onnxpb.NodeProto{n}
		return c
	}
	i32 := func(name string, vals ...int32) *onnxpb.TensorProto {
		t := intInit(name, 0)
		t.Int64Data = nil
		t.DataType = proto32(onnxpb.TensorProto_INT32)
		t.Dims = []int64{int64(len(vals))}
		t.Int32Data = vals
		return t
	}
	if err := build(with(i32("lens", 5, 5, 5))); err != nil {
		t.Errorf("full sequence_lens: %v", err)
	}
	for name, c := range map[string]opCase{
		"short sequence_lens": with(i32("lens", 5, 3, 5)),
		"clip":                with(i32("lens", 5, 5, 5), aFloat("clip", 3)),
		"activations":         with(i32("lens", 5, 5, 5), aStrings("activations", "Relu", "Tanh", "Tanh")),
	} {
		if err := build(c); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: error %v, want ErrUnsupported", name, err)
		}
	}
	// sequence_lens fed at run time.
	c := base
	c.inputs = append(append([]port(nil), base.inputs...), port{"lens", onnxpb.TensorProto_INT32, []int64{3}})
	n := proto1(base.nodes[0])
	n.Input = []string{"X", "W", "R", "B", "lens", "h0", "c0"}
	c.nodes = []*onnxpb.NodeProto{n}
	if err := build(c); err != nil {
		t.Errorf("run-time sequence_lens: %v", err)
	}
}
