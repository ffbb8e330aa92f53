package batcher

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/internal/bounded"
)

// ErrMemory is wrapped by a *MemoryError: sizes whose buffers would not fit in memory.
var ErrMemory = errors.New("batcher: not enough memory")

// Memory is what the process may still allocate, and where that figure came from.
type Memory struct {
	Available uint64 // bytes
	Source    string // for errors, e.g. "MemAvailable in /proc/meminfo"
}

// AvailableMemory is what the process may still allocate, as internal/bounded reads it for
// every tool: MemAvailable in /proc/meminfo, lowered to what the process's memory cgroup
// leaves and to the Go runtime's memory limit (GOMEMLIMIT); where none can be read it assumes
// bounded's fallback and says so in Source.
func AvailableMemory() Memory {
	m := bounded.Available()
	return Memory{Available: uint64(max(m.Bytes, 0)), Source: m.Source}
}

// MemoryError reports sizes whose buffers would not fit in the memory available, with the
// most of each size that would fit, the others unchanged.
type MemoryError struct {
	Env                                     string
	Workers, EnvsPerWorker, Steps, Episodes int    // the sizes checked (Episodes: Evaluate's)
	Need                                    uint64 // bytes; math.MaxUint64 when the sizes overflow 64 bits
	Memory
	// FitWorkers, FitEnvsPerWorker, FitSteps and FitEpisodes are the most of that size that
	// fits with the others unchanged; 0 when none does.
	FitWorkers, FitEnvsPerWorker, FitSteps, FitEpisodes int
}

func (e *MemoryError) Error() string {
	sizes := plural(e.Workers, "worker") + " × " + plural(e.EnvsPerWorker, "env") + " × " + plural(e.Steps, "step")
	if e.Episodes > 0 {
		sizes = plural(e.EnvsPerWorker, "env") + " × " + plural(e.Steps, "step") + " and " + plural(e.Episodes, "episode")
	}
	need := "about " + formatBytes(e.Need)
	if e.Need == math.MaxUint64 {
		need = "more than 64 bits can count (the sizes' product overflows)"
	}
	return fmt.Sprintf("%v: %s with %s needs %s, and %s is available (%s)",
		ErrMemory, e.Env, sizes, need, formatBytes(e.Available), e.Source)
}

func (e *MemoryError) Unwrap() error { return ErrMemory }

// footprint models the bytes a Batcher holds: fixed + W·perWorker + W·M·(perEnv + T·perRow)
// + episodes·perEpisode. The figures are upper estimates of what New, Collect, the shard
// writer and Evaluate allocate: per row the Rollout's columns (two observations, two
// actions, six float32 columns, an int64 version) and, when writing shards, the env-major
// scratch copies; per env the last observations, the worker's, env's and agent's buffers
// and its random streams; per worker an ONNX Runtime session and its goroutines.
type footprint struct {
	perRow, perEnv, perWorker, perEpisode, fixed uint64
}

const evalSteps = 64 // the rollout length Evaluate collects in

func newFootprint(spec envs.Spec, shards bool) footprint {
	od, ad := uint64(spec.Observation.Dim()), uint64(spec.Action.Dim())
	f := footprint{perRow: 8*od + 8*ad + 32, perEnv: 48*od + 32*ad + 256 + uint64(max(spec.EnvBytes, 0)), perWorker: 4 << 20, perEpisode: 64, fixed: 64 << 20}
	if spec.EnvBytes > 0 { // a simulated env's rows also hold its qpos and qvel (float64)
		f.perRow += 16 * od
	}
	if shards {
		f.perRow += 4*max(od, ad) + 4*od + 10
	}
	return f
}

// need is the footprint of the sizes x = (workers, envs per worker, steps, episodes),
// saturating at math.MaxUint64.
func (f footprint) need(x [4]uint64) uint64 {
	perEnv := addSat(f.perEnv, mulSat(x[2], f.perRow))
	n := addSat(f.fixed, mulSat(x[0], f.perWorker))
	n = addSat(n, mulSat(mulSat(x[0], x[1]), perEnv))
	return addSat(n, mulSat(x[3], f.perEpisode))
}

// fit is the most size k may be, the others as in x, within available: need is affine in
// each size.
func (f footprint) fit(x [4]uint64, k int, available uint64) int {
	x[k] = 0
	a := f.need(x)
	x[k] = 1
	b := f.need(x) - a
	if a >= available || b == 0 {
		return 0
	}
	return int(min((available-a)/b, math.MaxInt))
}

func (f footprint) check(env string, x [4]uint64, mem Memory) error {
	need := f.need(x)
	if need <= mem.Available {
		return nil
	}
	e := &MemoryError{Env: env, Workers: int(x[0]), EnvsPerWorker: int(x[1]), Steps: int(x[2]), Episodes: int(x[3]),
		Need: need, Memory: mem}
	e.FitWorkers, e.FitEnvsPerWorker = f.fit(x, 0, mem.Available), f.fit(x, 1, mem.Available)
	e.FitSteps, e.FitEpisodes = f.fit(x, 2, mem.Available), f.fit(x, 3, mem.Available)
	return e
}

// CheckMemory checks, before New allocates anything, that the buffers of a Batcher with cfg
// (and a shard writer's when shards is set) fit in mem: a *MemoryError (wrapping ErrMemory)
// when they do not, an ErrConfig error for a size out of range.
func CheckMemory(cfg Config, shards bool, mem Memory) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	x := [4]uint64{uint64(cfg.Workers), uint64(cfg.EnvsPerWorker), uint64(cfg.Steps), 0}
	return newFootprint(cfg.Env, shards).check(cfg.Env.ID, x, mem)
}

// CheckEvalMemory is CheckMemory for Evaluate with cfg: one worker of cfg.Envs envs, and the
// returns and lengths of cfg.Episodes episodes.
func CheckEvalMemory(cfg EvalConfig, mem Memory) error {
	if cfg.Episodes < 1 {
		return fmt.Errorf("%w: Episodes = %d, want >= 1", ErrConfig, cfg.Episodes)
	}
	if cfg.Envs == 0 {
		cfg.Envs = min(cfg.Episodes, 16)
	}
	if cfg.Envs < 0 {
		return fmt.Errorf("%w: Envs = %d, want >= 1", ErrConfig, cfg.Envs)
	}
	if cfg.Env.ID == "" {
		return fmt.Errorf("%w: Env is required", ErrConfig)
	}
	x := [4]uint64{1, uint64(cfg.Envs), evalSteps, uint64(cfg.Episodes)}
	return newFootprint(cfg.Env, false).check(cfg.Env.ID, x, mem)
}

// formatBytes writes n in binary units: "512 B", "1.5 MiB", "858.3 GiB".
func formatBytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, unit := float64(n)/1024, 0
	for v >= 1024 && unit < 5 {
		v /= 1024
		unit++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}[unit]
}

func mulSat(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// plural writes n and the noun, plural unless n is 1: "1 env", "3 steps".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
