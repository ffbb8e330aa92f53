package batcher

import (
	"sync"
	"time"
)

// A worker's two halves (Config.Pipeline) are two goroutines, each stepping half of the
// worker's envs with its own session, that take turns in ONNX Runtime: while one half's
// inference call runs, the other samples its actions, steps its envs and writes its rows,
// then waits for the turn. With inference taking most of a step (about 4/5 of a CartPole
// step at 1024 envs), the worker's inference then runs nearly all the time, and its other
// work on a second core.

// turn is the lock a worker's two halves (Config.Pipeline) take around their inference calls.
// A half waiting for it spins for up to turnSpin before it blocks: the other half's call
// ends within that on an idle machine, and the waiting half then starts its own call at
// once, where a goroutine parked on a sync.Mutex would start it only after the scheduler
// has woken a thread for it (tens of µs on a VM, with the worker's inference stopped).
type turn struct{ mu sync.Mutex }

// turnSpin bounds a half's spin for the turn: about two inference calls of 512 CartPole rows.
const turnSpin = 500 * time.Microsecond

func (t *turn) Lock() {
	if t.mu.TryLock() {
		return
	}
	start := time.Now()
	for i := 1; ; i++ {
		if t.mu.TryLock() {
			return
		}
		if i%32 == 0 && time.Since(start) > turnSpin {
			t.mu.Lock()
			return
		}
	}
}

func (t *turn) Unlock() { t.mu.Unlock() }

// rolloutEpisodes appends to dst the episodes that ended in r, eps(k) those goroutine k
// recorded: in goroutine order, or with Config.Pipeline each worker's two halves merged in
// the order one goroutine stepping all its envs records them (mergeHalves). Collect and
// Stream both order them so.
func (b *Batcher) rolloutEpisodes(dst []Episode, r *Rollout, eps func(k int) []Episode) []Episode {
	for k, w := range b.workers {
		switch {
		case !b.cfg.Pipeline:
			dst = append(dst, eps(k)...)
		case k%2 == 0:
			dst = mergeHalves(dst, r, k*w.m, w.m, eps(k), eps(k+1))
		}
	}
	return dst
}

// mergeHalves appends to dst the episodes of a worker's two halves (Config.Pipeline), a of
// its first m envs and b of its next m, from env off of r on, in the order one worker of all
// of them records them: by the step they ended at, then by env. The steps of r at which an
// env's episode ended (Terminated or Truncated) give that order.
func mergeHalves(dst []Episode, r *Rollout, off, m int, a, b []Episode) []Episode {
	for t := range r.T {
		if len(a) == 0 || len(b) == 0 {
			break
		}
		row := t*r.N + off
		term, trunc := r.Terminated[row:row+2*m], r.Truncated[row:row+2*m]
		for i := range term {
			if term[i] == 0 && trunc[i] == 0 {
				continue
			}
			if i < m && len(a) > 0 {
				dst, a = append(dst, a[0]), a[1:]
			} else if i >= m && len(b) > 0 {
				dst, b = append(dst, b[0]), b[1:]
			}
		}
	}
	return append(append(dst, a...), b...)
}
