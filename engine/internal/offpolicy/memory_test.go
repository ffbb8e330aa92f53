package offpolicy

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/engine/replay"
	"github.com/towerrl/towerrl/models"
)

// TestMemoryRoundTrip: a buffer stored into a checkpoint and loaded into a fresh Memory
// samples the same minibatch from the same stream; a checkpoint without the buffer loads
// as an empty one (held false); Filled's full size is worked by hand, 4·(2·3+1+3) bytes per
// transition; a buffer the memory cannot hold names buffer_size.
func TestMemoryRoundTrip(t *testing.T) {
	m, err := NewMemory(5, 3, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 7 { // wraps the ring of 5
		v := float32(k)
		obs, next := []float32{v, v + 0.1, v + 0.2}, []float32{v + 1, v + 1.1, v + 1.2}
		if err := m.Buf.Add(obs, []float32{float32(k % 2)}, []float32{v}, []float32{0}, []float32{0}, next, make([]float32, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, full := m.Filled(); n != 5 || full != 5*4*(2*3+1+3) {
		t.Fatalf("Filled = %d, _, %d; want 5 and %d", n, full, 5*4*(2*3+1+3))
	}
	c := &models.Checkpoint{Ints: map[string]int64{}, Bytes: map[string][]byte{}}
	if err := m.Store(c); err != nil {
		t.Fatal(err)
	}
	fresh, err := NewMemory(5, 3, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := fresh.Load(c); !held || err != nil {
		t.Fatalf("Load = %v, %v", held, err)
	}
	a, err := m.Sample(rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(a.Obs)
	b, err := fresh.Sample(rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Obs, want) {
		t.Fatalf("restored buffer sampled %v, the original %v", b.Obs, want)
	}
	empty, _ := NewMemory(5, 3, 1, 4)
	if held, err := empty.Load(&models.Checkpoint{Bytes: map[string][]byte{}}); held || err != nil || empty.Buf.Len() != 0 {
		t.Fatalf("Load of a checkpoint without the buffer = %v, %v (len %d)", held, err, empty.Buf.Len())
	}
	err = CheckMemory(1<<40, 1000, 1)
	if !errors.Is(err, replay.ErrMemory) || !strings.Contains(err.Error(), "buffer_size 1099511627776") {
		t.Fatalf("CheckMemory of 2^40 transitions: %v", err)
	}
}
