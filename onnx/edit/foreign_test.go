package edit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/internal/npy"
	"github.com/towerrl/towerrl/onnx"
	"google.golang.org/protobuf/proto"
)

// foreignDir holds the real-exporter fixtures of scripts/gen_fixtures_foreign.py.
const foreignDir = "../../testdata/foreign"

// foreign is the part of a foreign fixture's NAME.json this package reads.
type foreign struct {
	name         string
	DynamicBatch bool `json:"dynamic_batch"`
	Inputs       []struct {
		Name string `json:"name"`
	} `json:"inputs"`
	Outputs []struct {
		Name      string `json:"name"`
		BatchAxis int    `json:"batch_axis"`
		File      string `json:"file"`
	} `json:"outputs"`
	ExtraInputs []struct {
		Name string `json:"name"`
		Feed string `json:"feed"`
	} `json:"extra_inputs"`
	Recurrent *struct {
		StatePairs []struct {
			Input string `json:"input"`
		} `json:"state_pairs"`
		SeqLens       *struct{ Input string } `json:"seq_lens"`
		EpisodeStarts *struct{ Input string } `json:"episode_starts"`
	} `json:"recurrent"`
	InputFile string             `json:"input_file"`
	Bind      map[string]*string `json:"bind"`
}

func loadForeign(t *testing.T) []*foreign {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(foreignDir, "*.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no foreign fixtures in %s (%v)", foreignDir, err)
	}
	var out []*foreign
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fx := &foreign{name: strings.TrimSuffix(filepath.Base(p), ".json")}
		if err := json.Unmarshal(data, fx); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out = append(out, fx)
	}
	return out
}

// TestTensorsForeign lists the tensors of every foreign fixture: the tensors its NAME.json
// binds (logits, mean, value, actions; graph outputs or inner tensors) must be among them,
// batched.
func TestTensorsForeign(t *testing.T) {
	for _, fx := range loadForeign(t) {
		t.Run(fx.name, func(t *testing.T) {
			model, err := os.ReadFile(filepath.Join(foreignDir, fx.name+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			infos, err := Tensors(context.Background(), model, onnx.Config{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := parse(model)
			if err != nil {
				t.Fatal(err)
			}
			inits := newIndex(m).inits
			for role, name := range fx.Bind {
				if name == nil || inits[*name] != nil {
					continue // unbound, or a weight (log_std)
				}
				k := slices.IndexFunc(infos, func(info onnx.TensorInfo) bool { return info.Name == *name })
				if k < 0 || !infos[k].Batched {
					t.Errorf("%s tensor %q: not listed as batched among %d tensors", role, *name, len(infos))
				}
			}
		})
	}
}

// fill returns what the fixture's recordings fed input name besides the observations: 0 or 1
// for every element.
func (fx *foreign) fill(t *testing.T, name string) float64 {
	t.Helper()
	for _, e := range fx.ExtraInputs {
		if e.Name == name && strings.HasPrefix(e.Feed, "zeros") {
			return 0
		}
	}
	if r := fx.Recurrent; r != nil {
		for _, p := range r.StatePairs {
			if p.Input == name {
				return 0 // each row recorded from a zero state
			}
		}
		if r.EpisodeStarts != nil && r.EpisodeStarts.Input == name {
			return 0
		}
		if r.SeqLens != nil && r.SeqLens.Input == name {
			return 1
		}
	}
	t.Fatalf("the fixture does not say what input %q was fed", name)
	return 0
}

// TestDynamicBatchForeign rewrites every fixed-batch fixture written from the popular
// libraries' export recipes and checks the rewritten model, run on all the fixture's rows at
// once, against the outputs PyTorch gave row by row.
func TestDynamicBatchForeign(t *testing.T) {
	fixed := 0
	for _, fx := range loadForeign(t) {
		if fx.DynamicBatch {
			t.Run(fx.name, func(t *testing.T) {
				model, err := os.ReadFile(filepath.Join(foreignDir, fx.name+".onnx"))
				if err != nil {
					t.Fatal(err)
				}
				out, rep, err := DynamicBatch(context.Background(), model, Options{})
				if err != nil || !rep.Dynamic || !slices.Equal(out, model) {
					t.Fatalf("already dynamic: got report %v, error %v, model changed %v", rep, err, !slices.Equal(out, model))
				}
			})
			continue
		}
		fixed++
		t.Run(fx.name, func(t *testing.T) {
			model, err := os.ReadFile(filepath.Join(foreignDir, fx.name+".onnx"))
			if err != nil {
				t.Fatal(err)
			}
			obs, err := npy.ReadFile(filepath.Join(foreignDir, fx.InputFile))
			if err != nil {
				t.Fatal(err)
			}
			rows := obs.Shape[0]
			in := fx.Inputs[0].Name
			// The observations are PyTorch's; the verification inside DynamicBatch gives the
			// other inputs (recurrent states, flags) random values.
			out, rep, err := DynamicBatch(context.Background(), model, Options{Inputs: map[string][]float64{in: values(obs)}, Rows: rows})
			if err != nil {
				t.Fatalf("falls back: %v", err)
			}
			t.Logf("rewritten: %v", rep)
			checkPreserved(t, model, out, 0)
			// The same rewrite from a model parsed once (what package bind passes on), which
			// it reads without modifying.
			parsed, err := onnx.Parse(model)
			if err != nil {
				t.Fatal(err)
			}
			before := proto.Clone(parsed.Proto())
			out2, rep2, err := DynamicBatchModel(context.Background(), parsed, Options{Inputs: map[string][]float64{in: values(obs)}, Rows: rows})
			if err != nil || !slices.Equal(out2, out) || rep2.String() != rep.String() {
				t.Errorf("DynamicBatchModel: error %v, same model %v, report %v", err, slices.Equal(out2, out), rep2)
			}
			if !proto.Equal(before, parsed.Proto()) {
				t.Error("DynamicBatchModel modified the parsed model")
			}
			outAxes := map[string]int{}
			for _, o := range fx.Outputs {
				outAxes[o.Name] = o.BatchAxis
			}
			// Against PyTorch the other inputs get what the recordings fed them.
			feeds := map[string]*npy.Array{in: obs}
			m, err := parse(model)
			if err != nil {
				t.Fatal(err)
			}
			for _, vi := range newIndex(m).inputs[1:] {
				name := vi.GetName()
				shape := dims(vi)
				if ax, ok := rep.Inputs[name]; ok {
					shape[ax] = int64(rows)
				}
				a := &npy.Array{Descr: "<f8", F64: make([]float64, prod(shape))}
				for _, d := range shape {
					a.Shape = append(a.Shape, int(d))
				}
				v := fx.fill(t, name)
				for k := range a.F64 {
					a.F64[k] = v
				}
				feeds[name] = a
			}
			got := runAll(t, out, feeds, rep.Inputs, outAxes, rows)
			for _, o := range fx.Outputs {
				want, err := npy.ReadFile(filepath.Join(foreignDir, o.File))
				if err != nil {
					t.Fatal(err)
				}
				matchPyTorch(t, o.Name, want, got[o.Name], rows)
			}
			// Binding: expose the inner logits of the rewritten model; at full batch their
			// argmax must be the graph's own action, row by row.
			logits, actions := fx.Bind["logits"], fx.Bind["actions"]
			if logits == nil || actions == nil || *logits == *actions {
				return
			}
			exposed, err := Expose(out, *logits)
			if err != nil {
				t.Fatal(err)
			}
			outAxes[*logits] = 0
			got = runAll(t, exposed, feeds, rep.Inputs, outAxes, rows)
			l, a := got[*logits], got[*actions]
			n := len(l.f) / rows
			for row := range rows {
				best := 0
				for k := range n {
					if l.f[row*n+k] > l.f[row*n+best] {
						best = k
					}
				}
				if int64(best) != a.i[row] {
					t.Errorf("row %d: exposed logits %v, argmax %d; the graph's action %d", row, l.f[row*n:row*n+n], best, a.i[row])
				}
			}
			t.Logf("exposed %q: argmax = %q on all %d rows", *logits, *actions, rows)
		})
	}
	if fixed == 0 {
		t.Fatal("no fixed-batch fixture among the foreign ones")
	}
}
