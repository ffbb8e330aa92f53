package remote

import (
	"container/list"
	"fmt"
)

// rolloutKey identifies a rollout: the learner trains each key at most once.
type rolloutKey struct {
	batcher string
	session uint64
	seq     uint64
}

func (k rolloutKey) String() string { return fmt.Sprintf("%s/%016x/%d", k.batcher, k.session, k.seq) }

type sessionKey struct {
	batcher string
	session uint64
}

// dedup remembers which rollouts were delivered to the learner, in memory, within bounds:
// per batcher session the newest sequence number delivered (hi) and which of the window
// numbers below it were; at most sessions sessions, the least recently seen forgotten
// first. A sequence number more than window below hi counts as delivered (dropped): it can
// only be a copy that was stuck for window newer rollouts of its batcher. Not safe for
// concurrent use.
type dedup struct {
	window   uint64 // multiple of 64
	sessions int
	lru      *list.List // of *seqWindow, most recent first
	bySess   map[sessionKey]*list.Element
}

type seqWindow struct {
	key  sessionKey
	hi   uint64   // newest delivered; 0 before the first
	bits []uint64 // bit i set: hi-i delivered (i < window)
}

func newDedup(window, sessions int) *dedup {
	w := uint64(max(window, 64)+63) / 64 * 64
	return &dedup{window: w, sessions: max(sessions, 1), lru: list.New(), bySess: make(map[sessionKey]*list.Element)}
}

// seen reports whether k was delivered (or is too old to tell).
func (d *dedup) seen(k rolloutKey) bool {
	e, ok := d.bySess[sessionKey{k.batcher, k.session}]
	if !ok {
		return false
	}
	w := e.Value.(*seqWindow)
	switch {
	case k.seq > w.hi:
		return false
	case w.hi-k.seq >= d.window:
		return true
	}
	i := w.hi - k.seq
	return w.bits[i/64]&(1<<(i%64)) != 0
}

// mark records k as delivered.
func (d *dedup) mark(k rolloutKey) {
	sk := sessionKey{k.batcher, k.session}
	e, ok := d.bySess[sk]
	if ok {
		d.lru.MoveToFront(e)
	} else {
		e = d.lru.PushFront(&seqWindow{key: sk, bits: make([]uint64, d.window/64)})
		d.bySess[sk] = e
		for d.lru.Len() > d.sessions {
			last := d.lru.Back()
			delete(d.bySess, last.Value.(*seqWindow).key)
			d.lru.Remove(last)
		}
	}
	w := e.Value.(*seqWindow)
	if k.seq > w.hi {
		shiftLeft(w.bits, k.seq-w.hi)
		w.hi = k.seq
	}
	i := w.hi - k.seq
	if i < d.window {
		w.bits[i/64] |= 1 << (i % 64)
	}
}

// shiftLeft moves bit i of bits to bit i+n, dropping bits shifted past the end.
func shiftLeft(bits []uint64, n uint64) {
	words := n / 64
	if words >= uint64(len(bits)) {
		clear(bits)
		return
	}
	s := n % 64
	for i := len(bits) - 1; i >= 0; i-- {
		var v uint64
		if j := i - int(words); j >= 0 {
			v = bits[j] << s
			if s != 0 && j > 0 {
				v |= bits[j-1] >> (64 - s)
			}
		}
		bits[i] = v
	}
}

// unmark forgets that k was delivered (it was not handed over after all). A sequence
// number that slid out of the window stays counted as delivered.
func (d *dedup) unmark(k rolloutKey) {
	e, ok := d.bySess[sessionKey{k.batcher, k.session}]
	if !ok {
		return
	}
	w := e.Value.(*seqWindow)
	if k.seq > w.hi {
		return
	}
	if i := w.hi - k.seq; i < d.window {
		w.bits[i/64] &^= 1 << (i % 64)
	}
}
