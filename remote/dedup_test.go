package remote

import (
	"math/rand/v2"
	"testing"
)

func TestDedup(t *testing.T) {
	k := func(b string, sess, seq uint64) rolloutKey { return rolloutKey{b, sess, seq} }
	for _, tc := range []struct {
		name   string
		window int
		marked []rolloutKey
		seen   []rolloutKey
		unseen []rolloutKey
	}{
		{"in order", 64, []rolloutKey{k("a", 1, 1), k("a", 1, 2), k("a", 1, 3)},
			[]rolloutKey{k("a", 1, 1), k("a", 1, 3)}, []rolloutKey{k("a", 1, 4), k("b", 1, 1), k("a", 2, 1)}},
		{"gap", 64, []rolloutKey{k("a", 1, 1), k("a", 1, 3)},
			[]rolloutKey{k("a", 1, 3)}, []rolloutKey{k("a", 1, 2)}},
		{"jump past the window", 64, []rolloutKey{k("a", 1, 5), k("a", 1, 500)},
			// 5 slid out of the window: counted as seen, as is everything older.
			[]rolloutKey{k("a", 1, 5), k("a", 1, 100), k("a", 1, 500)}, []rolloutKey{k("a", 1, 499), k("a", 1, 450)}},
		{"shift by a non-multiple of 64", 128, []rolloutKey{k("a", 1, 1), k("a", 1, 2), k("a", 1, 80), k("a", 1, 100)},
			[]rolloutKey{k("a", 1, 1), k("a", 1, 2), k("a", 1, 80), k("a", 1, 100)}, []rolloutKey{k("a", 1, 3), k("a", 1, 79), k("a", 1, 81)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDedup(tc.window, 8)
			for _, m := range tc.marked {
				d.mark(m)
			}
			for _, s := range tc.seen {
				if !d.seen(s) {
					t.Errorf("%v not seen", s)
				}
			}
			for _, s := range tc.unseen {
				if d.seen(s) {
					t.Errorf("%v seen", s)
				}
			}
		})
	}
}

// TestDedupRandom checks the window against a map, for sequence numbers arriving out of
// order within the window.
func TestDedupRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := newDedup(256, 4)
	ref := map[uint64]bool{}
	hi := uint64(0)
	for range 20000 {
		seq := hi + 1 + uint64(r.IntN(10))
		if r.IntN(3) == 0 && hi > 200 {
			seq = hi - uint64(r.IntN(200)) // within the window
		}
		key := rolloutKey{"b", 9, seq}
		if got := d.seen(key); got != ref[seq] {
			t.Fatalf("seq %d (hi %d): seen %v, want %v", seq, hi, got, ref[seq])
		}
		if r.IntN(5) == 0 {
			d.mark(key)
			d.unmark(key)
			if d.seen(key) && !ref[seq] {
				t.Fatalf("seq %d seen after unmark", seq)
			}
		}
		d.mark(key)
		ref[seq] = true
		hi = max(hi, seq)
	}
}

func TestDedupForgetsLeastRecentSession(t *testing.T) {
	d := newDedup(64, 2)
	d.mark(rolloutKey{"a", 1, 1})
	d.mark(rolloutKey{"b", 1, 1})
	d.mark(rolloutKey{"a", 1, 2}) // a is the most recent
	d.mark(rolloutKey{"c", 1, 1}) // evicts b
	if d.seen(rolloutKey{"b", 1, 1}) {
		t.Error("b was not forgotten")
	}
	if !d.seen(rolloutKey{"a", 1, 1}) || !d.seen(rolloutKey{"c", 1, 1}) {
		t.Error("a or c forgotten")
	}
}
