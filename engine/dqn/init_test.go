package dqn

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestStart: Start sets the online network and its target to the values given, and refuses
// another size, changing nothing.
func TestStart(t *testing.T) {
	d, err := New(Config{Hidden: []int{8}, Minibatch: 4}, 3, 2, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := make([]float32, len(d.Params()))
	for i := range p {
		p[i] = float32(i%7)/10 - 0.3
	}
	before := slices.Clone(d.Params())
	if err := d.Start(p[1:]); !errors.Is(err, ErrConfig) || !slices.Equal(d.Params(), before) {
		t.Fatalf("Start of one value too few: %v", err)
	}
	if err := d.Start(p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Params(), p) || !slices.Equal(d.Target(), p) {
		t.Fatal("Start did not set the online network and its target")
	}
}
