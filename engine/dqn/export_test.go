package dqn

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// TestExport: ONNX Runtime runs the exported Q-network to the Go forward pass's Q-values; the
// metadata names the qvalues head with its ε, the env and the spaces, and binds the output as
// the head's parameters; a spec of other sizes is refused.
func TestExport(t *testing.T) {
	const obsDim, actions, rows = 6, 3, 33
	rng := rand.New(rand.NewPCG(5, 6))
	d, err := New(Config{Hidden: []int{20, 84}, Act: kernels.Tanh, Minibatch: 4}, obsDim, actions, rng)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	spec := head.Spec{EnvID: "Acrobot-v1", ObsShape: []int{obsDim}, N: actions}
	model, err := d.Export(spec, 0.05, 4)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: rows})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	got, ok, err := head.FromMetadata(sess.Metadata())
	if err != nil || !ok || got.Head != head.QValuesKind || got.Epsilon != 0.05 || got.EnvID != "Acrobot-v1" || got.Version != 4 || got.N != actions {
		t.Fatalf("metadata %v: %+v %v %v", sess.Metadata(), got, ok, err)
	}
	var outs []head.Tensor
	for _, o := range sess.Outputs() {
		outs = append(outs, head.Tensor{Name: o.Name, DType: head.Float32, Batched: o.Batched, Row: o.Row})
	}
	if b, err := head.Bind(got, outs, head.Names{}); err != nil || b.Params != 0 || b.Value >= 0 {
		t.Fatalf("bound %+v, %v: want q_values as the head's parameters", b, err)
	}

	obs := make([]float32, rows*obsDim)
	for i := range obs {
		obs[i] = float32(rng.NormFloat64())
	}
	w := d.net.NewWork(rows)
	copy(w.In(), obs)
	d.net.Forward(d.params, w)
	if _, err := onnx.Feed(sess, 0, []int64{rows, obsDim}, obs); err != nil {
		t.Fatal(err)
	}
	if err := sess.Run(rows); err != nil {
		t.Fatal(err)
	}
	q, _ := onnx.Output[float32](sess, 0)
	for i, want := range w.Out() {
		if math.Abs(float64(q[i]-want)) > 1e-5*max(1, math.Abs(float64(want))) {
			t.Fatalf("Q-value %d: ONNX Runtime %v, the Go forward pass %v", i, q[i], want)
		}
	}

	if _, err := d.Export(head.Spec{ObsShape: []int{obsDim}, N: 2}, 0, 0); err == nil || !strings.Contains(err.Error(), "2 actions") {
		t.Errorf("a spec of 2 actions for a Q-network of 3: %v", err)
	}
}
