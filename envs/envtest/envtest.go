// Package envtest is the conformance suite every registered environment
// passes. Call Run with the environment's id from a test:
//
//	func TestConformance(t *testing.T) {
//		for _, id := range envs.IDs() {
//			t.Run(id, func(t *testing.T) { envtest.Run(t, id) })
//		}
//	}
//
// It checks spaces, buffer shapes, Reset and Step, the autoreset rule,
// determinism under a seed and across worker splits, truncation at the time
// limit, the single-env API, bad actions, and that Step does not allocate.
// All randomness comes from fixed seeds.
package envtest

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

// Options adjust the suite.
type Options struct {
	// Light runs every check with fewer envs and steps (about a tenth of the env steps), for
	// environments whose steps cost tens of microseconds or more (physics simulators). The
	// registered time limit is then checked on one env.
	Light bool
}

// size is full, or light under Options.Light.
func (o Options) size(full, light int) int {
	if o.Light {
		return light
	}
	return full
}

// Run runs the conformance suite on the environment registered as id.
func Run(t *testing.T, id string) {
	t.Helper()
	RunWith(t, id, Options{})
}

// RunWith is Run with options.
func RunWith(t *testing.T, id string, o Options) {
	t.Helper()
	spec, err := envs.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("Spec", func(t *testing.T) { testSpec(t, spec) })
	t.Run("Shapes", func(t *testing.T) { testShapes(t, spec) })
	t.Run("NeedsReset", func(t *testing.T) { testNeedsReset(t, spec) })
	t.Run("SpacesRespected", func(t *testing.T) { testSpaces(t, spec, o) })
	t.Run("Deterministic", func(t *testing.T) { testDeterministic(t, spec, o) })
	t.Run("WorkerSplit", func(t *testing.T) { testWorkerSplit(t, spec, o) })
	t.Run("Threads", func(t *testing.T) { testThreads(t, spec, o) })
	t.Run("Truncation", func(t *testing.T) { testTruncation(t, spec, o) })
	t.Run("SingleEnv", func(t *testing.T) { testSingle(t, spec, o) })
	t.Run("BadActions", func(t *testing.T) { testBadActions(t, spec) })
	t.Run("NoAllocs", func(t *testing.T) { testNoAllocs(t, spec, o) })
}

// RandomActions returns k batches of uniformly random valid actions for n
// envs with action space sp, drawn from a PCG seeded with seed.
func RandomActions(sp envs.Space, n, k int, seed uint64) []envs.Actions {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	out := make([]envs.Actions, k)
	for j := range out {
		switch sp := sp.(type) {
		case envs.Discrete:
			a := make([]int, n)
			for i := range a {
				a[i] = rng.IntN(sp.N)
			}
			out[j].Discrete = a
		case envs.Box:
			dim := sp.Dim()
			a := make([]float32, n*dim)
			for i := range a {
				lo, hi := float64(sp.Low[i%dim]), float64(sp.High[i%dim])
				a[i] = float32(lo + (hi-lo)*rng.Float64())
			}
			out[j].Box = a
		}
	}
	return out
}

func mustMake(t *testing.T, id string, cfg envs.Config) envs.VecEnv {
	t.Helper()
	v, err := envs.Make(id, cfg)
	if err != nil {
		t.Fatalf("Make(%q, %+v): %v", id, cfg, err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return v
}

func testSpec(t *testing.T, spec envs.Spec) {
	if spec.Observation.Dim() <= 0 || len(spec.Observation.Low) != spec.Observation.Dim() {
		t.Errorf("observation space %v: bounds do not match shape", spec.Observation)
	}
	switch sp := spec.Action.(type) {
	case envs.Discrete:
		if sp.N <= 0 {
			t.Errorf("action space %v is empty", sp)
		}
	case envs.Box:
		if sp.Dim() <= 0 || len(sp.Low) != sp.Dim() || len(sp.High) != sp.Dim() {
			t.Errorf("action space %v: bounds do not match shape", sp)
		}
	default:
		t.Errorf("action space %T is neither Discrete nor Box", spec.Action)
	}
	if again, err := envs.ParseSpace(spec.Action.String()); err != nil || again.String() != spec.Action.String() {
		t.Errorf("ParseSpace(%q) = %v, %v; want the same space", spec.Action.String(), again, err)
	}
}

func testShapes(t *testing.T, spec envs.Spec) {
	for _, n := range []int{1, 7} {
		v := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 1})
		if v.NumEnvs() != n {
			t.Errorf("NumEnvs = %d, want %d", v.NumEnvs(), n)
		}
		b := v.Buffers()
		od := spec.Observation.Dim()
		for _, c := range []struct {
			name string
			got  int
			want int
		}{
			{"Obs", len(b.Obs), n * od},
			{"FinalObs", len(b.FinalObs), n * od},
			{"Rewards", len(b.Rewards), n},
			{"Terminated", len(b.Terminated), n},
			{"Truncated", len(b.Truncated), n},
		} {
			if c.got != c.want {
				t.Errorf("n=%d: len(%s) = %d, want %d", n, c.name, c.got, c.want)
			}
		}
		if err := v.Reset(); err != nil {
			t.Fatal(err)
		}
		if err := v.Step(RandomActions(spec.Action, n, 1, 3)[0]); err != nil {
			t.Fatal(err)
		}
		b2 := v.Buffers()
		if &b2.Obs[0] != &b.Obs[0] || &b2.Rewards[0] != &b.Rewards[0] {
			t.Errorf("n=%d: buffers moved between calls; they must stay put", n)
		}
	}
}

func testNeedsReset(t *testing.T, spec envs.Spec) {
	v := mustMake(t, spec.ID, envs.Config{NumEnvs: 2})
	if err := v.Step(RandomActions(spec.Action, 2, 1, 1)[0]); !errors.Is(err, envs.ErrNeedsReset) {
		t.Errorf("Step before Reset = %v, want ErrNeedsReset", err)
	}
}

func finite(x []float32) bool {
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}

// testSpaces steps random actions and checks every observation lies in the
// observation space, flags are 0 or 1, rewards are finite, and a freshly
// reset env reports no flags.
func testSpaces(t *testing.T, spec envs.Spec, o Options) {
	n, steps := o.size(16, 4), o.size(300, 100)
	v := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 11})
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	b := v.Buffers()
	od := spec.Observation.Dim()
	checkObs := func(step int, what string, rows []float32, i int) {
		row := rows[i*od : (i+1)*od]
		if !spec.Observation.Contains(row) {
			t.Fatalf("step %d env %d: %s %v outside %v", step, i, what, row, spec.Observation)
		}
	}
	for i := range n {
		checkObs(0, "reset observation", b.Obs, i)
		if b.Rewards[i] != 0 || b.Terminated[i] != 0 || b.Truncated[i] != 0 {
			t.Fatalf("after Reset env %d: reward %v terminated %v truncated %v, want zeros",
				i, b.Rewards[i], b.Terminated[i], b.Truncated[i])
		}
	}
	acts := RandomActions(spec.Action, n, steps, 5)
	for s, a := range acts {
		if err := v.Step(a); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		if !finite(b.Rewards) {
			t.Fatalf("step %d: rewards %v not finite", s, b.Rewards)
		}
		for i := range n {
			checkObs(s, "observation", b.Obs, i)
			for _, f := range []float32{b.Terminated[i], b.Truncated[i]} {
				if f != 0 && f != 1 {
					t.Fatalf("step %d env %d: flag %v, want 0 or 1", s, i, f)
				}
			}
			if b.Terminated[i] == 1 || b.Truncated[i] == 1 {
				if !finite(b.FinalObs[i*od : (i+1)*od]) {
					t.Fatalf("step %d env %d: final observation not finite", s, i)
				}
			}
		}
	}
}

// trajectory runs v for len(acts) steps from Reset and returns every buffer
// of every step, concatenated.
func trajectory(t *testing.T, v envs.VecEnv, acts []envs.Actions) []float32 {
	t.Helper()
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	b := v.Buffers()
	out := slices.Clone(b.Obs)
	for _, a := range acts {
		if err := v.Step(a); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Obs...)
		out = append(out, b.Rewards...)
		out = append(out, b.Terminated...)
		out = append(out, b.Truncated...)
		for i := range v.NumEnvs() {
			if b.Terminated[i] == 1 || b.Truncated[i] == 1 {
				od := len(b.Obs) / v.NumEnvs()
				out = append(out, b.FinalObs[i*od:(i+1)*od]...)
			}
		}
	}
	return out
}

func testDeterministic(t *testing.T, spec envs.Spec, o Options) {
	n := o.size(8, 4)
	acts := RandomActions(spec.Action, n, o.size(250, 60), 9)
	a := trajectory(t, mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 42}), acts)
	b := trajectory(t, mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 42}), acts)
	c := trajectory(t, mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 43}), acts)
	if !slices.Equal(a, b) {
		t.Error("two VecEnvs with the same seed and actions diverged")
	}
	if slices.Equal(a, c) {
		t.Error("seeds 42 and 43 gave identical trajectories")
	}
	// Distinct envs get distinct streams: their first observations differ.
	v := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 42})
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	obs, od := v.Buffers().Obs, spec.Observation.Dim()
	for i := 1; i < n; i++ {
		if slices.Equal(obs[:od], obs[i*od:(i+1)*od]) {
			t.Errorf("envs 0 and %d start in the same state", i)
		}
	}
}

// testThreads checks that a VecEnv stepped in several threads (Config.Threads) follows the
// one-thread trajectories bit for bit (spinning or not), with uneven shards and a time limit that truncates,
// refuses a bad action by its global index before any env moves, and steps without allocating.
func testThreads(t *testing.T, spec envs.Spec, o Options) {
	const n = 11
	acts := RandomActions(spec.Action, n, o.size(300, 60), 17)
	cfg := envs.Config{NumEnvs: n, Seed: 5, MaxEpisodeSteps: 40}
	want := trajectory(t, mustMake(t, spec.ID, cfg), acts)
	for _, threads := range []int{2, 3, 16, -2} {
		c := cfg
		c.Threads = threads
		if threads < 0 { // 2 shards that park instead of spinning: the same trajectories
			c.Threads, c.NoSpin = -threads, true
		}
		v := mustMake(t, spec.ID, c)
		if v.Spec().MaxEpisodeSteps != 40 {
			t.Fatalf("Threads %d: spec time limit %d, want 40", threads, v.Spec().MaxEpisodeSteps)
		}
		if got := trajectory(t, v, acts); !slices.Equal(got, want) {
			t.Fatalf("Threads %d: the trajectories differ from one thread's", threads)
		}
		// A bad action for the last env: refused, naming env n-1, with no env moved.
		before := slices.Clone(v.Buffers().Obs)
		bad := RandomActions(spec.Action, n, 1, 3)[0]
		if bad.Discrete != nil {
			bad.Discrete[n-1] = -1
		} else {
			bad.Box[len(bad.Box)-1] = float32(math.NaN())
		}
		var ae *envs.ActionError
		if err := v.Step(bad); !errors.As(err, &ae) || ae.Env != n-1 {
			t.Fatalf("Threads %d: bad action for env %d: %v", threads, n-1, err)
		}
		if !slices.Equal(before, v.Buffers().Obs) {
			t.Fatalf("Threads %d: an env moved on a refused step", threads)
		}
		// AllocsPerRun counts the whole process's allocations and rounds their mean down: a
		// Step that allocates shows over any number of runs, while a few stray ones of the
		// runtime's fade over 200 (once, under make test's load, Humanoid's 16 shards counted
		// 20 in 20 runs, where every other run of the same code counted none; the runtime
		// allocates when it starts an OS thread, as it may for the shards' cgo calls).
		if allocs := testing.AllocsPerRun(200, func() {
			if err := v.Step(acts[0]); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("Threads %d: Step allocates %v times", threads, allocs)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if err := v.Step(acts[0]); !errors.Is(err, envs.ErrClosed) {
			t.Fatalf("Threads %d: Step after Close = %v, want ErrClosed", threads, err)
		}
	}
}

// testWorkerSplit checks that envs spread over several VecEnvs with offsets
// follow the trajectories they follow in one VecEnv.
func testWorkerSplit(t *testing.T, spec envs.Spec, o Options) {
	n, steps := 8, o.size(250, 60)
	acts := RandomActions(spec.Action, n, steps, 13)
	whole := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 7})
	if err := whole.Reset(); err != nil {
		t.Fatal(err)
	}
	splits := []int{0, 3, 4, 8} // workers hold envs [0,3), [3,4), [4,8)
	parts := make([]envs.VecEnv, len(splits)-1)
	for w := range parts {
		parts[w] = mustMake(t, spec.ID, envs.Config{NumEnvs: splits[w+1] - splits[w], Seed: 7, Offset: splits[w]})
		if err := parts[w].Reset(); err != nil {
			t.Fatal(err)
		}
	}
	od, dim := spec.Observation.Dim(), spec.Action.Dim()
	for s := 0; s <= steps; s++ {
		if s > 0 {
			if err := whole.Step(acts[s-1]); err != nil {
				t.Fatal(err)
			}
		}
		wb := whole.Buffers()
		for w, p := range parts {
			lo, hi := splits[w], splits[w+1]
			if s > 0 {
				var a envs.Actions
				if acts[s-1].Discrete != nil {
					a.Discrete = acts[s-1].Discrete[lo:hi]
				} else {
					a.Box = acts[s-1].Box[lo*dim : hi*dim]
				}
				if err := p.Step(a); err != nil {
					t.Fatal(err)
				}
			}
			pb := p.Buffers()
			if !slices.Equal(pb.Obs, wb.Obs[lo*od:hi*od]) || !slices.Equal(pb.Rewards, wb.Rewards[lo:hi]) ||
				!slices.Equal(pb.Terminated, wb.Terminated[lo:hi]) || !slices.Equal(pb.Truncated, wb.Truncated[lo:hi]) {
				t.Fatalf("step %d: worker %d (envs [%d,%d)) diverged from the single VecEnv", s, w, lo, hi)
			}
		}
	}
}

// testTruncation checks that Truncated is 1 exactly when an episode reaches
// the time limit, under the registered limit and under an override.
func testTruncation(t *testing.T, spec envs.Spec, o Options) {
	if spec.MaxEpisodeSteps <= 0 {
		t.Skip("no time limit")
	}
	for _, limit := range []int{0, 7} {
		n := 8
		if limit == 0 {
			n = o.size(8, 1)
		}
		v := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 3, MaxEpisodeSteps: limit})
		want := spec.MaxEpisodeSteps
		if limit > 0 {
			want = limit
		}
		if got := v.Spec().MaxEpisodeSteps; got != want {
			t.Errorf("Spec().MaxEpisodeSteps = %d, want %d", got, want)
		}
		if err := v.Reset(); err != nil {
			t.Fatal(err)
		}
		b := v.Buffers()
		elapsed := make([]int, n)
		truncations := 0
		acts := RandomActions(spec.Action, n, 64, 17)
		for s := range 2*want + 3 {
			if err := v.Step(acts[s%len(acts)]); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				elapsed[i]++
				if (b.Truncated[i] == 1) != (elapsed[i] == want) {
					t.Fatalf("limit %d, env %d, episode step %d: truncated = %v", want, i, elapsed[i], b.Truncated[i])
				}
				if b.Truncated[i] == 1 {
					truncations++
				}
				if b.Terminated[i] == 1 || b.Truncated[i] == 1 {
					elapsed[i] = 0
				}
			}
		}
		if limit > 0 && truncations == 0 {
			t.Errorf("limit %d: no episode was truncated in %d steps", want, 2*want+3)
		}
	}
}

// testSingle checks that New(id, seed) plays the episodes of env 0 of
// Make(id, {Seed: seed}) given the same actions, and refuses to step an ended
// episode.
func testSingle(t *testing.T, spec envs.Spec, o Options) {
	const seed = 5
	e, err := envs.New(spec.ID, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	v := mustMake(t, spec.ID, envs.Config{Seed: seed})
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	obs, err := e.Reset()
	if err != nil {
		t.Fatal(err)
	}
	b := v.Buffers()
	if !slices.Equal(obs, b.Obs) {
		t.Fatalf("first observation %v, VecEnv env 0 has %v", obs, b.Obs)
	}
	acts := RandomActions(spec.Action, 1, o.size(1000, 300), 21)
	ended := 0
	for s, a := range acts {
		if err := v.Step(a); err != nil {
			t.Fatal(err)
		}
		obs, r, term, trunc, err := e.Step(a)
		if err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
		if r != b.Rewards[0] || term != (b.Terminated[0] == 1) || trunc != (b.Truncated[0] == 1) {
			t.Fatalf("step %d: Env gives (%v, %v, %v), VecEnv (%v, %v, %v)",
				s, r, term, trunc, b.Rewards[0], b.Terminated[0], b.Truncated[0])
		}
		if term || trunc {
			ended++
			if !slices.Equal(obs, b.FinalObs) {
				t.Fatalf("step %d: final observation %v, VecEnv has %v", s, obs, b.FinalObs)
			}
			if _, _, _, _, err := e.Step(a); !errors.Is(err, envs.ErrNeedsReset) {
				t.Fatalf("Step after the episode ended = %v, want ErrNeedsReset", err)
			}
			if obs, err = e.Reset(); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(obs, b.Obs) {
			t.Fatalf("step %d: observation %v, VecEnv env 0 has %v", s, obs, b.Obs)
		}
	}
	if ended == 0 {
		t.Log("no episode ended in 1000 steps")
	}
}

func testBadActions(t *testing.T, spec envs.Spec) {
	const n = 4
	v := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 1})
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	before := slices.Clone(v.Buffers().Obs)
	type bad struct {
		name string
		a    envs.Actions
		env  int // env named by the *ActionError, -1 when none is expected
	}
	var cases []bad
	switch sp := spec.Action.(type) {
	case envs.Discrete:
		cases = []bad{
			{"index too large", envs.Actions{Discrete: []int{0, 0, sp.N, 0}}, 2},
			{"negative index", envs.Actions{Discrete: []int{0, 0, 0, -1}}, 3},
			{"short", envs.Actions{Discrete: []int{0, 0}}, -1},
			{"long", envs.Actions{Discrete: make([]int, n+1)}, -1},
			{"wrong kind", envs.Actions{Box: make([]float32, n)}, -1},
			{"none", envs.Actions{}, -1},
		}
	case envs.Box:
		dim := sp.Dim()
		nan := make([]float32, n*dim)
		nan[1*dim] = float32(math.NaN())
		inf := make([]float32, n*dim)
		inf[3*dim] = float32(math.Inf(-1))
		cases = []bad{
			{"NaN", envs.Actions{Box: nan}, 1},
			{"-Inf", envs.Actions{Box: inf}, 3},
			{"short", envs.Actions{Box: make([]float32, n*dim-1)}, -1},
			{"wrong kind", envs.Actions{Discrete: make([]int, n)}, -1},
			{"none", envs.Actions{}, -1},
		}
	}
	for _, c := range cases {
		err := v.Step(c.a)
		if !errors.Is(err, envs.ErrAction) {
			t.Errorf("%s: Step = %v, want ErrAction", c.name, err)
			continue
		}
		var ae *envs.ActionError
		if errors.As(err, &ae) != (c.env >= 0) || (c.env >= 0 && ae.Env != c.env) {
			t.Errorf("%s: error %q should name env %d", c.name, err, c.env)
		}
		if !slices.Equal(before, v.Buffers().Obs) {
			t.Fatalf("%s: a rejected Step moved the envs", c.name)
		}
	}
	// Out-of-bounds Box values are clipped, not rejected.
	if sp, ok := spec.Action.(envs.Box); ok {
		big := make([]float32, n*sp.Dim())
		for i := range big {
			big[i] = 10 * (sp.High[i%sp.Dim()] + 1)
		}
		if err := v.Step(envs.Actions{Box: big}); err != nil {
			t.Errorf("out-of-bounds finite Box action: %v, want clipping", err)
		}
	}
}

func testNoAllocs(t *testing.T, spec envs.Spec, o Options) {
	n := o.size(64, 8)
	v := mustMake(t, spec.ID, envs.Config{NumEnvs: n, Seed: 1})
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	acts := RandomActions(spec.Action, n, 16, 1)
	j := 0
	allocs := testing.AllocsPerRun(o.size(500, 50), func() {
		if err := v.Step(acts[j%len(acts)]); err != nil {
			t.Fatal(err)
		}
		j++
	})
	if allocs != 0 {
		t.Errorf("Step allocates %v times per call, want 0", allocs)
	}
}

// Lookup returns the registered spec of id, failing t when there is none.
func Lookup(t testing.TB, id string) envs.Spec {
	t.Helper()
	spec, err := envs.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
