package sac

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
	policyhead "github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx"
)

// TestExportActor: ONNX Runtime runs the exported actor to the outputs of the Go forward pass
// (the mean, and the log std bounded as the update bounds it: clipped, with rows on both sides
// of the bounds, or squashed by tanh), on both bounding modes and activations; the metadata
// names the tanh-gaussian head, the env and the spaces; a spec of other sizes is refused.
func TestExportActor(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"clamp relu", Config{Hidden: []int{23, 9}, LogStdMin: -0.3, LogStdMax: 0.2}},
		{"tanh tanh", Config{Hidden: []int{16}, Act: kernels.Tanh, LogStd: Tanh}},
	} {
		t.Run(c.name, func(t *testing.T) {
			const obsDim, actDim, rows = 5, 3, 37
			rng := rand.New(rand.NewPCG(3, 4))
			c.cfg.Minibatch = 4
			s, err := New(c.cfg, obsDim, actDim, rng)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range s.actorP { // larger weights than the initialisation, so that the clamp bites
				s.actorP[i] *= 4
			}
			spec := policyhead.Spec{EnvID: "Test-v0", ObsShape: []int{obsDim}, Low: []float32{-2, -1, 0}, High: []float32{2, 1, 5}}
			model, err := s.ExportActor(spec, 7)
			if err != nil {
				t.Fatal(err)
			}
			sess, err := onnx.New(context.Background(), model, onnx.Config{MaxBatch: rows})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			got, ok, err := policyhead.FromMetadata(sess.Metadata())
			if err != nil || !ok || got.Head != policyhead.TanhGaussianKind || got.EnvID != "Test-v0" || got.Version != 7 ||
				got.ActionSpace() != "box:3:-2,-1,0:2,1,5" {
				t.Fatalf("metadata %v: %+v %v %v", sess.Metadata(), got, ok, err)
			}

			obs := make([]float32, rows*obsDim)
			for i := range obs {
				obs[i] = float32(rng.NormFloat64() * 2)
			}
			w := s.actor.NewWork(rows)
			copy(w.In(), obs)
			s.actor.Forward(s.actorP, w)
			if _, err := onnx.Feed(sess, 0, []int64{rows, obsDim}, obs); err != nil {
				t.Fatal(err)
			}
			if err := sess.Run(rows); err != nil {
				t.Fatal(err)
			}
			clipped := 0
			for k, name := range []string{"mean", "log_std"} {
				i, err := sess.OutputIndex(name)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := onnx.Output[float32](sess, i)
				for r := range rows {
					for j := range actDim {
						raw := float64(w.Out()[r*2*actDim+k*actDim+j])
						want := raw
						if k == 1 {
							lo, hi := s.cfg.LogStdMin, s.cfg.LogStdMax
							if c.cfg.LogStd == Tanh {
								want = lo + 0.5*(hi-lo)*(math.Tanh(raw)+1)
							} else if want = min(max(raw, lo), hi); want != raw {
								clipped++
							}
						}
						if g := float64(out[r*actDim+j]); math.Abs(g-want) > 1e-5*max(1, math.Abs(want)) {
							t.Fatalf("%s[%d][%d] = %v, the Go forward pass gives %v", name, r, j, g, want)
						}
					}
				}
			}
			if c.cfg.LogStd == Clamp && clipped == 0 {
				t.Error("no log std was clipped: the test does not reach the bounds")
			}
		})
	}

	s, err := New(Config{Hidden: []int{8}, Minibatch: 4}, 5, 3, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bad := policyhead.Spec{ObsShape: []int{4}, Low: []float32{-1, -1, -1}, High: []float32{1, 1, 1}}
	if _, err := s.ExportActor(bad, 0); err == nil || !strings.Contains(err.Error(), "observation shape [4]") {
		t.Errorf("a spec of 4 observations for an actor of 5: %v", err)
	}
}
