package engine

import (
	"context"
	"testing"

	"github.com/towerrl/towerrl/onnx"
)

// TestFineTuneKeepsTheForeignGraph fine-tunes the PyTorch CartPole policy briefly: the exported
// policy keeps the original input and output names and initializer layout, carries the new
// version, differs from the original weights, and loads in ONNX Runtime and the batcher.
func TestFineTuneKeepsTheForeignGraph(t *testing.T) {
	dir := t.TempDir()
	res, err := Train(context.Background(), Config{Env: "CartPole-v1", TotalSteps: 5120, Seed: 2, EvalEpisodes: 5,
		InitPolicy: "../testdata/mlp_tanh.onnx"}, Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	s, err := onnx.Open(context.Background(), res.Policy, onnx.Config{MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outs := s.Outputs()
	if s.Inputs()[0].Name != "obs" || len(outs) != 2 || outs[0].Name != "logits" || outs[1].Name != "value" {
		t.Fatalf("inputs %v outputs %v", s.Inputs(), outs)
	}
	if s.Metadata()["towerrl.version"] != "10" || s.Metadata()["towerrl.action_space"] != "discrete:2" {
		t.Fatalf("metadata %v", s.Metadata())
	}
	orig, err := onnx.Open(context.Background(), "../testdata/mlp_tanh.onnx", onnx.Config{MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	in := make([]float32, 64)
	for i := range in {
		in[i] = float32(i%7) * 0.1
	}
	for _, sess := range []*onnx.Session{s, orig} {
		if _, err := onnx.Feed(sess, 0, []int64{16, 4}, in); err != nil {
			t.Fatal(err)
		}
		if err := sess.Run(16); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := onnx.Output[float32](s, 1)
	b, _ := onnx.Output[float32](orig, 1)
	if a[0] == b[0] {
		t.Fatal("fine-tuning left the value output unchanged")
	}
}
