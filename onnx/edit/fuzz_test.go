package edit

import (
	"testing"

	"github.com/towerrl/towerrl/onnx/onnxpb"
)

func fuzzSeeds(f *testing.F) {
	for _, name := range []string{"zeros_cat", "gru_view_seq", "fixed8"} {
		data, err := readFixture(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "/Concat_output_0")
		f.Add(data[:len(data)/3], "x")
	}
	f.Add(newBuilder(11).input("x", tFloat, 1, 1, 4).output("y", tFloat, 4).
		node("Squeeze", ins("x"), ins("s")).node("Relu", ins("s"), ins("y")).bytes(f), "s")
	f.Add([]byte{}, "")
	f.Add([]byte("\x0a\x03abc"), "abc")
}

// FuzzExpose feeds arbitrary bytes and names to Expose: it must return a model that parses
// again, or an error, and never panic.
func FuzzExpose(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		out, err := Expose(data, name)
		if err != nil {
			return
		}
		if _, err := parse(out); err != nil {
			t.Fatalf("Expose returned a model that does not parse: %v", err)
		}
	})
}

// FuzzPlan runs DynamicBatch's parsing, type propagation, analysis and rewrite (everything
// but ONNX Runtime) on arbitrary bytes, taking the shapes ONNX Runtime would report from the
// model's own declarations. It must never panic.
func FuzzPlan(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, _ string) {
		m, err := parse(data)
		if err != nil {
			return
		}
		ix := newIndex(m)
		inferTypes(ix)
		batch, dynamic, err := fixedBatch(ix, nil)
		if err != nil || dynamic {
			return
		}
		inShapes := map[string][]int64{}
		for _, vi := range ix.inputs {
			if inShapes[vi.GetName()], err = concreteShape(vi, none, batch, nil); err != nil {
				return
			}
		}
		observed := map[string][]int64{}
		for _, vis := range [][]*onnxpb.ValueInfoProto{m.GetGraph().GetValueInfo(), m.GetGraph().GetOutput()} {
			for _, vi := range vis {
				if d := dims(vi); d != nil {
					observed[vi.GetName()] = d
				}
			}
		}
		c := &chooser{}
		for range 16 {
			if p, err := analyse(ix, batch, inShapes, observed, nil, c); err == nil {
				out, _ := apply(m, p)
				if _, err := marshal(out); err != nil {
					t.Fatal(err)
				}
				vectorOutputs(m, observed)
			}
			if !c.next(nil) {
				break
			}
		}
	})
}
