package graph

import (
	"os"
	"testing"
)

func TestFlatSharesMemory(t *testing.T) {
	data, err := os.ReadFile("../../testdata/mlp_tanh.onnx")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	p := m.NewParams()
	before := p.Clone()
	flat, err := p.Flat()
	if err != nil {
		t.Fatal(err)
	}
	if len(flat) != p.Size() {
		t.Fatalf("flat holds %d of %d values", len(flat), p.Size())
	}
	off := 0
	for _, name := range p.Names() {
		v, _ := p.Value(name)
		w, _ := before.Value(name)
		got, want := v.Data().([]float32), w.Data().([]float32)
		for k := range want {
			if got[k] != want[k] || flat[off+k] != want[k] {
				t.Fatalf("%s[%d] moved: %v, flat %v, want %v", name, k, got[k], flat[off+k], want[k])
			}
		}
		flat[off] += 1 // a write to the flat vector is a write to the tensor
		if got[0] != want[0]+1 {
			t.Fatalf("%s does not share the flat vector's memory", name)
		}
		off += len(want)
	}
	again, err := p.Flat()
	if err != nil || &again[0] != &flat[0] {
		t.Fatalf("second Flat: %v, same buffer %v", err, err == nil && &again[0] == &flat[0])
	}
	if _, err := (&Params{dt: p.dt}).Flat(); err == nil {
		t.Fatal("empty Params flattened")
	}
}
