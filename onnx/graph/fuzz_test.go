package graph

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
)

// FuzzParse feeds arbitrary bytes to Parse, Check, NewParamsFor, Build (for the graph
// outputs and for an inner tensor) and WriteBack: each may fail, none may panic. Seeds: the
// committed corpus in testdata/fuzz/FuzzParse, every coverage case and the import fixtures.
func FuzzParse(f *testing.F) {
	for _, c := range coverageCases() {
		f.Add(c.bytes(f))
	}
	for _, fx := range allFixtures {
		f.Add(readFile(f, fx.name+".onnx"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			return
		}
		_ = m.Check()
		tensors := m.Tensors()
		for _, name := range tensors {
			_, _ = m.Producer(name)
		}
		p, err := m.NewParamsFor(TrainOptions{})
		if err != nil {
			t.Fatalf("default parameters: %v", err)
		}
		shapes := map[string][]int{}
		for _, in := range m.Inputs() {
			s := make([]int, len(in.Shape))
			for k, d := range in.Shape {
				s[k] = d
				if d < 0 {
					s[k] = 2
				}
			}
			shapes[in.Name] = s
		}
		builds := []BuildOptions{{Batch: 2}, {Batch: 2, Shapes: shapes}}
		if len(tensors) > 0 {
			builds = append(builds, BuildOptions{Batch: 1, Shapes: shapes, Outputs: []string{tensors[len(tensors)/2]}})
		}
		for _, o := range builds {
			if _, err := m.BuildWith(G.NewGraph(), p, o); err != nil && strings.Contains(err.Error(), "runtime error") {
				t.Errorf("Build %+v: %v", o, err)
			}
		}
		if _, err := m.WriteBack(p, WriteOptions{BumpVersion: true}); err != nil {
			t.Errorf("WriteBack of the model's own parameters: %v", err)
		}
	})
}
