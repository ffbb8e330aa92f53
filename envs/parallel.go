package envs

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/towerrl/towerrl/internal/spin"
)

var _ VecEnv = (*parallelEnv)(nil)

// parallelEnv is the VecEnv of Make with Config.Threads > 1: its envs in contiguous shards,
// shardsPerThread for each of its goroutines (one of them the caller of Step), over one set of
// buffers, shard k being a vecEnv whose buffers are rows [lo[k], lo[k+1]) of the whole. At each
// step the goroutines claim the shards in turn until none is left, so a goroutine whose envs
// cost more this step (contacts, resets) is not waited for by the others. Every env's
// random stream depends only on (seed, global index), so the trajectories are those of the
// one-goroutine VecEnv, bit for bit. The shards' goroutines spin briefly between steps (see
// internal/spin) when each can have its own CPU, so a step pays no thread wake-up, unless
// Config.NoSpin.
type parallelEnv struct {
	spec   Spec
	n      int
	adim   int // Box action values per env
	shards []*vecEnv
	lo     []int // first env of each shard, then n
	buf    Buffers
	closed bool

	acts    []Actions    // per shard: the current step's actions, written by Step before pool.Run
	threads int          // the pool's goroutines
	next    atomic.Int64 // the next shard to claim in this step
	pool    *spin.Pool   // its goroutines claim shards until none is left (goroutine 0 is Step's)
}

// shardsPerThread is how many shards each goroutine's share is cut into, so that the goroutines
// claiming them end a step within a small shard of each other. With one fixed shard each, a
// step waited for the slower of two MuJoCo shards (contacts and resets differ from env to env),
// and HalfCheetah-v4 and Humanoid-v4 on 2 threads ran at 88–97% of the bare mj_step loop, which
// syncs once per 20 steps (envs/mujoco's BenchmarkStep). A claim is one atomic add.
const shardsPerThread = 4

func newParallel(spec Spec, newDyn func(n int) (Dynamics, error), cfg Config, threads int) (*parallelEnv, error) {
	n, od := cfg.NumEnvs, spec.Observation.Dim()
	if cfg.MaxEpisodeSteps > 0 {
		spec.MaxEpisodeSteps = cfg.MaxEpisodeSteps // as each shard's own spec
	}
	p := &parallelEnv{spec: spec, n: n, adim: spec.Action.Dim(), buf: newBuffers(n, od)}
	k := min(threads*shardsPerThread, n)
	for s := range k {
		lo, hi := s*n/k, (s+1)*n/k
		p.lo = append(p.lo, lo)
		sc := cfg
		sc.NumEnvs, sc.Offset = hi-lo, cfg.Offset+lo
		dyn, err := newDyn(hi - lo)
		if err != nil {
			for _, s := range p.shards {
				s.Close()
			}
			return nil, fmt.Errorf("making %s: %w", spec.ID, err)
		}
		p.shards = append(p.shards, newVecOver(spec, dyn, sc, Buffers{
			Obs:        p.buf.Obs[lo*od : hi*od : hi*od],
			Rewards:    p.buf.Rewards[lo:hi:hi],
			Terminated: p.buf.Terminated[lo:hi:hi],
			Truncated:  p.buf.Truncated[lo:hi:hi],
			FinalObs:   p.buf.FinalObs[lo*od : hi*od : hi*od],
		}))
	}
	p.lo = append(p.lo, n)
	p.acts = make([]Actions, k)
	mode := spin.ModeFor(cfg.NoSpin)
	p.threads = min(threads, n)
	p.pool = spin.NewPool(p.threads, func(int) {
		for s := int(p.next.Add(1)) - 1; s < k; s = int(p.next.Add(1)) - 1 {
			p.shards[s].step(p.acts[s])
		}
	}, spin.WithMode(mode))
	return p, nil
}

func (p *parallelEnv) Spec() Spec       { return cloneSpec(p.spec) }
func (p *parallelEnv) NumEnvs() int     { return p.n }
func (p *parallelEnv) Buffers() Buffers { return p.buf }

func (p *parallelEnv) Reset() error {
	if p.closed {
		return ErrClosed
	}
	for _, s := range p.shards {
		if err := s.Reset(); err != nil {
			return err
		}
	}
	return nil
}

func (p *parallelEnv) Step(a Actions) error {
	// All actions are checked before any env moves, with the env's global index in the error.
	// The shards are Reset together, so shard 0 tells whether they have been.
	if err := checkStep(p.closed, p.shards[0].ready, p.spec.Action, p.n, a); err != nil {
		return err
	}
	for s := range p.shards {
		lo, hi := p.lo[s], p.lo[s+1]
		if a.Discrete != nil {
			p.acts[s] = Actions{Discrete: a.Discrete[lo:hi:hi]}
		} else {
			p.acts[s] = Actions{Box: a.Box[lo*p.adim : hi*p.adim : hi*p.adim]}
		}
	}
	p.next.Store(0)
	p.pool.Run()
	return nil
}

// Close stops the shards' goroutines. Idempotent.
func (p *parallelEnv) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.pool.Close()
	var errs []error
	for _, s := range p.shards {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// Snapshot implements Snapshotter: not for a threaded VecEnv yet.
func (p *parallelEnv) Snapshot() ([]byte, error) {
	return nil, fmt.Errorf("%w: %s with Threads = %d: snapshots need Threads = 1", ErrSnapshot, p.spec.ID, p.threads)
}

// Restore implements Snapshotter: not for a threaded VecEnv yet.
func (p *parallelEnv) Restore([]byte) error {
	_, err := p.Snapshot()
	return err
}

func (p *parallelEnv) String() string {
	return fmt.Sprintf("%s×%d in %d threads", p.spec.ID, p.n, p.threads)
}
