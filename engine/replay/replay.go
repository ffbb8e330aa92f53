package replay

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// ErrConfig is wrapped by the errors of New about its Config.
var ErrConfig = errors.New("replay: bad config")

// ErrMemory is wrapped by New's error when the buffer would not fit in Config.MaxBytes.
var ErrMemory = errors.New("replay: buffer too large")

// ErrInput is wrapped by the errors of Add and Sample about their arguments.
var ErrInput = errors.New("replay: bad input")

// Config shapes a buffer.
type Config struct {
	// Capacity is the number of transitions kept; the oldest is overwritten when full.
	// Required.
	Capacity int
	// ObsDim is the number of values of an observation (its shape flattened). Required.
	ObsDim int
	// ActDim is the number of values of an action: 1 for a Discrete action (its index as a
	// float32), the Box's size otherwise. Required.
	ActDim int
	// MaxBytes bounds the memory New may allocate. Default 0: the memory the system reports
	// available (Linux's MemAvailable), or no bound where it reports none.
	MaxBytes int64
}

// rowBytes is the bytes of one transition: obs, next obs, action, reward, terminated,
// truncated, each value a float32.
func (c Config) rowBytes() int64 { return 4 * (2*int64(c.ObsDim) + int64(c.ActDim) + 3) }

// Bytes is the memory a buffer of cfg holds, or an error naming the field that is out of
// range (or that makes the size overflow).
func Bytes(cfg Config) (int64, error) {
	switch {
	case cfg.Capacity < 1:
		return 0, fmt.Errorf("%w: Capacity = %d, want at least 1", ErrConfig, cfg.Capacity)
	case cfg.ObsDim < 1:
		return 0, fmt.Errorf("%w: ObsDim = %d, want at least 1", ErrConfig, cfg.ObsDim)
	case cfg.ActDim < 1:
		return 0, fmt.Errorf("%w: ActDim = %d, want at least 1", ErrConfig, cfg.ActDim)
	case cfg.MaxBytes < 0:
		return 0, fmt.Errorf("%w: MaxBytes = %d", ErrConfig, cfg.MaxBytes)
	}
	row := cfg.rowBytes()
	if row > math.MaxInt64/int64(cfg.Capacity) {
		return 0, fmt.Errorf("%w: Capacity %d × %d bytes per transition overflows", ErrMemory, cfg.Capacity, row)
	}
	return row * int64(cfg.Capacity), nil
}

// Buffer is a ring of transitions. The zero value is not usable; make one with New.
type Buffer struct {
	cfg        Config
	obs, next  []float32 // [Capacity×ObsDim]
	act        []float32 // [Capacity×ActDim]
	rew        []float32 // [Capacity]
	term, trnc []float32 // [Capacity]
	pos, size  int       // next row to write; rows filled
	added      int64     // transitions added since New (or the restored snapshot's)
}

// Check returns nil when a buffer of cfg fits in cfg.MaxBytes (by default the memory
// available), else the error New would return, before anything is allocated.
func Check(cfg Config) error {
	need, err := Bytes(cfg)
	if err != nil {
		return err
	}
	limit, what := cfg.MaxBytes, "Config.MaxBytes"
	if limit == 0 {
		limit, what = availableMemory(), "the memory available (MemAvailable)"
	}
	if limit > 0 && need > limit {
		return fmt.Errorf("%w: Capacity %d × %d bytes per transition is %s, more than %s, %s",
			ErrMemory, cfg.Capacity, cfg.rowBytes(), byteSize(need), what, byteSize(limit))
	}
	return nil
}

// New allocates a buffer of cfg, after checking that it fits in cfg.MaxBytes (Check).
func New(cfg Config) (*Buffer, error) {
	if err := Check(cfg); err != nil {
		return nil, err
	}
	n := cfg.Capacity
	return &Buffer{cfg: cfg, obs: make([]float32, n*cfg.ObsDim), next: make([]float32, n*cfg.ObsDim),
		act: make([]float32, n*cfg.ActDim), rew: make([]float32, n), term: make([]float32, n), trnc: make([]float32, n)}, nil
}

// Config is the buffer's configuration.
func (b *Buffer) Config() Config { return b.cfg }

// Len is the number of transitions stored (at most Capacity).
func (b *Buffer) Len() int { return b.size }

// Added is the number of transitions added since the buffer was made (or since the run that
// wrote the restored snapshot began).
func (b *Buffer) Added() int64 { return b.added }

// Add stores one VecEnv step of n envs (n = len(rewards)): obs [n×ObsDim] the observations
// the actions [n×ActDim] were taken in, then the step's envs.Buffers: rewards, terminated,
// truncated [n], nextObs [n×ObsDim] (the observations after the step, a new episode's first
// where one ended) and finalObs [n×ObsDim] (the ended episode's last, read only where
// terminated or truncated is set). finalObs may be nil when no episode ended. Transitions go
// in env order; once full, each overwrites the oldest.
func (b *Buffer) Add(obs, actions, rewards, terminated, truncated, nextObs, finalObs []float32) error {
	n, od, ad := len(rewards), b.cfg.ObsDim, b.cfg.ActDim
	switch {
	case len(obs) != n*od || len(nextObs) != n*od:
		return fmt.Errorf("%w: %d rewards with %d observations and %d next observations of %d values", ErrInput, n, len(obs), len(nextObs), od)
	case len(actions) != n*ad:
		return fmt.Errorf("%w: %d rewards with %d action values, %d per action", ErrInput, n, len(actions), ad)
	case len(terminated) != n || len(truncated) != n:
		return fmt.Errorf("%w: %d rewards with %d terminated and %d truncated flags", ErrInput, n, len(terminated), len(truncated))
	}
	for i := range n {
		if (terminated[i] != 0 || truncated[i] != 0) && len(finalObs) != n*od {
			return fmt.Errorf("%w: env %d's episode ended and finalObs holds %d values, want %d", ErrInput, i, len(finalObs), n*od)
		}
	}
	for i := range n {
		r := b.pos
		next := nextObs[i*od : (i+1)*od]
		if terminated[i] != 0 || truncated[i] != 0 {
			next = finalObs[i*od : (i+1)*od]
		}
		copy(b.obs[r*od:(r+1)*od], obs[i*od:(i+1)*od])
		copy(b.next[r*od:(r+1)*od], next)
		copy(b.act[r*ad:(r+1)*ad], actions[i*ad:(i+1)*ad])
		b.rew[r], b.term[r], b.trnc[r] = rewards[i], flag(terminated[i]), flag(truncated[i])
		b.pos = (b.pos + 1) % b.cfg.Capacity
		b.size = min(b.size+1, b.cfg.Capacity)
		b.added++
	}
	return nil
}

func flag(v float32) float32 {
	if v != 0 {
		return 1
	}
	return 0
}

// Batch is a sampled minibatch, columnar: row i of each column is transition i.
type Batch struct {
	ObsDim, ActDim int
	Obs, NextObs   []float32 // [rows×ObsDim]
	Actions        []float32 // [rows×ActDim]
	Rewards        []float32 // [rows]
	// Terminated is 1 where the transition ended its episode in a terminal state: its value
	// target does not bootstrap. Truncated is 1 where a time limit cut it (NextObs is the
	// final observation; bootstrap from it).
	Terminated, Truncated []float32
	// Index is the buffer row each transition was drawn from.
	Index []int
}

// NewBatch allocates a batch of rows transitions.
func NewBatch(rows, obsDim, actDim int) *Batch {
	return &Batch{ObsDim: obsDim, ActDim: actDim, Obs: make([]float32, rows*obsDim), NextObs: make([]float32, rows*obsDim),
		Actions: make([]float32, rows*actDim), Rewards: make([]float32, rows), Terminated: make([]float32, rows),
		Truncated: make([]float32, rows), Index: make([]int, rows)}
}

// Len is the number of rows.
func (b *Batch) Len() int { return len(b.Rewards) }

// Sample fills dst with dst.Len() transitions drawn uniformly, with replacement, from the
// stored ones: row i is transition rng.IntN(Len()), drawn in row order.
func (b *Buffer) Sample(rng *rand.Rand, dst *Batch) error {
	switch {
	case b.size == 0:
		return fmt.Errorf("%w: sampling from an empty buffer", ErrInput)
	case dst.ObsDim != b.cfg.ObsDim || dst.ActDim != b.cfg.ActDim:
		return fmt.Errorf("%w: a batch of %d observation and %d action values for a buffer of %d and %d", ErrInput,
			dst.ObsDim, dst.ActDim, b.cfg.ObsDim, b.cfg.ActDim)
	}
	for i := range dst.Index {
		dst.Index[i] = rng.IntN(b.size)
	}
	b.Gather(dst)
	return nil
}

// Gather fills dst with the transitions at the buffer rows dst.Index (each below Len).
func (b *Buffer) Gather(dst *Batch) {
	od, ad := b.cfg.ObsDim, b.cfg.ActDim
	for i, r := range dst.Index {
		copy(dst.Obs[i*od:(i+1)*od], b.obs[r*od:(r+1)*od])
		copy(dst.NextObs[i*od:(i+1)*od], b.next[r*od:(r+1)*od])
		copy(dst.Actions[i*ad:(i+1)*ad], b.act[r*ad:(r+1)*ad])
		dst.Rewards[i], dst.Terminated[i], dst.Truncated[i] = b.rew[r], b.term[r], b.trnc[r]
	}
}

// availableMemory is Linux's MemAvailable in bytes, or 0 where it cannot be read.
func availableMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		rest, ok := strings.CutPrefix(s.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil || kb <= 0 || kb > math.MaxInt64/1024 {
			return 0
		}
		return kb * 1024
	}
	return 0
}

// byteSize prints n bytes in GiB or MiB.
func byteSize(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
