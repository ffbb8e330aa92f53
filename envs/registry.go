package envs

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

type entry struct {
	spec Spec
	new  func(n int) (Dynamics, error)
}

var registry struct {
	mu          sync.RWMutex // guards entries and unavailable
	entries     map[string]entry
	unavailable map[string]error // ids known but not built in, and why
}

// RegisterUnavailable records an environment id this build knows but cannot run (its native
// library is not built in), with the reason and what to do: Lookup, Make and New return an
// error wrapping ErrUnavailable that says so, where an unknown id would only list the known
// ones. An id registered by Register wins. Meant for init functions; a duplicate panics.
func RegisterUnavailable(id string, why error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.unavailable[id]; dup {
		panic("envs: RegisterUnavailable called twice for " + id)
	}
	if registry.unavailable == nil {
		registry.unavailable = make(map[string]error)
	}
	registry.unavailable[id] = why
}

// Register makes an environment available to Make and New under spec.ID.
// newDynamics returns the dynamics of n envs (n >= 1). Register is meant to
// be called from init functions; it panics if the spec is invalid or the id
// is already registered.
func Register(spec Spec, newDynamics func(n int) Dynamics) {
	if newDynamics == nil {
		panic(fmt.Sprintf("envs: Register(%q): nil constructor", spec.ID))
	}
	RegisterNative(spec, func(n int) (Dynamics, error) { return newDynamics(n), nil })
}

// RegisterNative is Register for dynamics whose construction can fail: those over a native
// library (a model to compile, memory to allocate outside Go). Make and New return its error.
func RegisterNative(spec Spec, newDynamics func(n int) (Dynamics, error)) {
	if err := validateSpec(spec); err != nil {
		panic(fmt.Sprintf("envs: Register(%q): %v", spec.ID, err))
	}
	if newDynamics == nil {
		panic(fmt.Sprintf("envs: Register(%q): nil constructor", spec.ID))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.entries[spec.ID]; dup {
		panic("envs: Register called twice for " + spec.ID)
	}
	if registry.entries == nil {
		registry.entries = make(map[string]entry)
	}
	registry.entries[spec.ID] = entry{spec: cloneSpec(spec), new: newDynamics}
}

func validateSpec(s Spec) error {
	if s.ID == "" {
		return fmt.Errorf("empty id")
	}
	if err := s.Observation.Validate(); err != nil {
		return fmt.Errorf("observation: %w", err)
	}
	switch a := s.Action.(type) {
	case Discrete:
		if a.N <= 0 {
			return fmt.Errorf("action: discrete with N = %d", a.N)
		}
	case Box:
		if err := a.Validate(); err != nil {
			return fmt.Errorf("action: %w", err)
		}
	default:
		return fmt.Errorf("action space must be Discrete or Box, got %T", s.Action)
	}
	if s.MaxEpisodeSteps < 0 {
		return fmt.Errorf("MaxEpisodeSteps = %d", s.MaxEpisodeSteps)
	}
	return nil
}

func cloneBox(b Box) Box {
	return Box{Shape: slices.Clone(b.Shape), Low: slices.Clone(b.Low), High: slices.Clone(b.High)}
}

// cloneSpec deep-copies the slices of a spec so callers cannot alias the
// registry's copy.
func cloneSpec(s Spec) Spec {
	s.Observation = cloneBox(s.Observation)
	if b, ok := s.Action.(Box); ok {
		s.Action = cloneBox(b)
	}
	return s
}

// IDs lists the registered environment ids, sorted.
func IDs() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	ids := make([]string, 0, len(registry.entries))
	for id := range registry.entries {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Lookup returns the spec registered under id. An unknown id is an error
// wrapping ErrUnknownEnv that lists the known ids.
func Lookup(id string) (Spec, error) {
	e, err := lookup(id)
	if err != nil {
		return Spec{}, err
	}
	return cloneSpec(e.spec), nil
}

func lookup(id string) (entry, error) {
	registry.mu.RLock()
	e, ok := registry.entries[id]
	why, known := registry.unavailable[id]
	registry.mu.RUnlock()
	if !ok && known {
		return entry{}, fmt.Errorf("%w: %s: %v", ErrUnavailable, id, why)
	}
	if !ok {
		return entry{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownEnv, id, strings.Join(IDs(), ", "))
	}
	return e, nil
}

// Config configures Make. The zero value is one env, seed 0, global index 0,
// and the registered time limit.
type Config struct {
	// NumEnvs is the number of envs N stepped together. Default (0): 1.
	NumEnvs int
	// Seed selects the random streams. Default 0.
	Seed uint64
	// Offset is the global index of this VecEnv's first env: env i draws its
	// reset noise from the stream derived from (Seed, Offset+i) alone. Spread
	// envs over workers with consecutive offsets ([0,m), [m,2m), …) and the
	// trajectories are those of one VecEnv holding them all. Default 0.
	Offset int
	// MaxEpisodeSteps overrides the registered time limit when > 0.
	// Default (0): the registered limit.
	MaxEpisodeSteps int
	// Threads steps the envs in this many contiguous shards, each on its own goroutine (the
	// caller of Step takes the first), with the trajectories of one thread bit for bit: for
	// one inference call per step over many envs whose stepping would not keep up on one core
	// (a GPU batcher). Keep Threads × the VecEnvs stepped at once within the cores. Default
	// (0 or 1): the calling goroutine only. Snapshots need Threads ≤ 1.
	Threads int
	// NoSpin makes the shards' goroutines (Threads > 1) park at once between steps instead of
	// spinning briefly first (internal/spin): for machines shared with other work. The
	// trajectories are the same. Default false.
	NoSpin bool
}

// Make returns a VecEnv of cfg.NumEnvs copies of the environment registered
// under id (a Gymnasium id such as "CartPole-v1"). Call Reset before Step.
func Make(id string, cfg Config) (VecEnv, error) {
	e, err := lookup(id)
	if err != nil {
		return nil, err
	}
	if cfg.NumEnvs == 0 {
		cfg.NumEnvs = 1
	}
	switch {
	case cfg.NumEnvs < 0:
		return nil, fmt.Errorf("%w: NumEnvs = %d, want >= 1", ErrConfig, cfg.NumEnvs)
	case cfg.Offset < 0:
		return nil, fmt.Errorf("%w: Offset = %d, want >= 0", ErrConfig, cfg.Offset)
	case cfg.MaxEpisodeSteps < 0 || cfg.MaxEpisodeSteps > math.MaxInt32:
		return nil, fmt.Errorf("%w: MaxEpisodeSteps = %d, want 0 (registered limit) to %d",
			ErrConfig, cfg.MaxEpisodeSteps, math.MaxInt32)
	case cfg.Threads < 0:
		return nil, fmt.Errorf("%w: Threads = %d, want >= 0", ErrConfig, cfg.Threads)
	}
	if cfg.Threads > 1 && cfg.NumEnvs > 1 {
		return newParallel(cloneSpec(e.spec), e.new, cfg, cfg.Threads)
	}
	dyn, err := e.new(cfg.NumEnvs)
	if err != nil {
		return nil, fmt.Errorf("making %s: %w", e.spec.ID, err)
	}
	return newVec(cloneSpec(e.spec), dyn, cfg), nil
}

// New returns a single env registered under id. Its random stream is the one
// of global index 0 under seed, so its successive episodes are those of env 0
// of Make(id, Config{Seed: seed}) given the same actions.
func New(id string, seed uint64) (Env, error) {
	e, err := lookup(id)
	if err != nil {
		return nil, err
	}
	spec := cloneSpec(e.spec)
	dyn, err := e.new(1)
	if err != nil {
		return nil, fmt.Errorf("making %s: %w", e.spec.ID, err)
	}
	return &single{
		spec:  spec,
		dyn:   dyn,
		rng:   newStream(seed, 0),
		obs:   make([]float32, spec.Observation.Dim()),
		limit: spec.MaxEpisodeSteps,
	}, nil
}
