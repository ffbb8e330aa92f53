package envs_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

func TestRegistry(t *testing.T) {
	want := []string{"Acrobot-v1", "CartPole-v1", "CartPoleNoVel-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"}
	if got := envs.IDs(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("IDs() = %v, want %v", got, want)
	}
	limits := map[string]int{
		"CartPole-v1": 500, "CartPoleNoVel-v1": 500, "Pendulum-v1": 200, "MountainCar-v0": 200,
		"MountainCarContinuous-v0": 999, "Acrobot-v1": 500,
	}
	spaces := map[string]string{
		"CartPole-v1":              "discrete:2",
		"CartPoleNoVel-v1":         "discrete:2",
		"Pendulum-v1":              "box:1:-2:2",
		"MountainCar-v0":           "discrete:3",
		"MountainCarContinuous-v0": "box:1:-1:1",
		"Acrobot-v1":               "discrete:3",
	}
	obsDims := map[string]int{
		"CartPole-v1": 4, "CartPoleNoVel-v1": 4, "Pendulum-v1": 3, "MountainCar-v0": 2,
		"MountainCarContinuous-v0": 2, "Acrobot-v1": 6,
	}
	for id, limit := range limits {
		s, err := envs.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		if s.MaxEpisodeSteps != limit || s.Action.String() != spaces[id] || s.Observation.Dim() != obsDims[id] {
			t.Errorf("%s: limit %d, action %v, obs dim %d; want %d, %s, %d",
				id, s.MaxEpisodeSteps, s.Action, s.Observation.Dim(), limit, spaces[id], obsDims[id])
		}
	}
}

func TestUnknownIDListsKnown(t *testing.T) {
	_, err := envs.Make("CartPole-v0", envs.Config{})
	if !errors.Is(err, envs.ErrUnknownEnv) {
		t.Fatalf("Make(CartPole-v0) = %v, want ErrUnknownEnv", err)
	}
	for _, id := range envs.IDs() {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("error %q does not list %s", err, id)
		}
	}
	if _, err := envs.New("Nope-v9", 0); !errors.Is(err, envs.ErrUnknownEnv) {
		t.Errorf("New(Nope-v9) = %v, want ErrUnknownEnv", err)
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	spec, err := envs.Lookup("CartPole-v1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering CartPole-v1 twice did not panic")
		}
	}()
	envs.Register(spec, func(int) envs.Dynamics { return nil })
}

func TestConfigErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		cfg   envs.Config
		field string
	}{
		{envs.Config{NumEnvs: -1}, "NumEnvs"},
		{envs.Config{Offset: -3}, "Offset"},
		{envs.Config{MaxEpisodeSteps: -1}, "MaxEpisodeSteps"},
	} {
		_, err := envs.Make("CartPole-v1", c.cfg)
		if !errors.Is(err, envs.ErrConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Make(%+v) = %v, want ErrConfig naming %s", c.cfg, err, c.field)
		}
	}
}

// TestActionErrorsNameEnvAndValue checks the messages of bad actions.
func TestActionErrorsNameEnvAndValue(t *testing.T) {
	tests := []struct {
		id   string
		a    envs.Actions
		want string
	}{
		{"CartPole-v1", envs.Actions{Discrete: []int{1, 0, 2}}, "env 2: action 2 outside discrete:2"},
		{"Acrobot-v1", envs.Actions{Discrete: []int{-1, 0, 2}}, "env 0: action -1 outside discrete:3"},
		{"Pendulum-v1", envs.Actions{Box: []float32{0, float32(math.NaN()), 1}}, "env 1: action[0] = NaN"},
		{"MountainCarContinuous-v0", envs.Actions{Box: []float32{0, 0, float32(math.Inf(1))}}, "env 2: action[0] = +Inf"},
		{"CartPole-v1", envs.Actions{Discrete: []int{1}}, "1 discrete actions for 3 envs"},
		{"Pendulum-v1", envs.Actions{Box: []float32{1, 2}}, "2 Box action values for 3 envs"},
		{"Pendulum-v1", envs.Actions{Discrete: []int{1, 1, 1}}, "Discrete actions given to an env with action space box:1:-2:2"},
	}
	for _, tt := range tests {
		v, err := envs.Make(tt.id, envs.Config{NumEnvs: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Reset(); err != nil {
			t.Fatal(err)
		}
		err = v.Step(tt.a)
		if !errors.Is(err, envs.ErrAction) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Step(%+v) = %v, want ErrAction containing %q", tt.id, tt.a, err, tt.want)
		}
	}
}

// TestCartPoleRewardOnTerminatingStep checks that with autoreset the step
// that terminates an episode earns 1 (Gymnasium's steps_beyond_terminated
// rule), its flags are set and its final observation is past the threshold.
func TestCartPoleRewardOnTerminatingStep(t *testing.T) {
	v, err := envs.Make("CartPole-v1", envs.Config{NumEnvs: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	b := v.Buffers()
	for step := 1; step <= 500; step++ {
		if err := v.Step(envs.Actions{Discrete: []int{1}}); err != nil { // always push right: falls fast
			t.Fatal(err)
		}
		if b.Rewards[0] != 1 {
			t.Fatalf("step %d: reward %v, want 1", step, b.Rewards[0])
		}
		if b.Terminated[0] == 1 {
			if b.Truncated[0] != 0 {
				t.Errorf("terminated at step %d but also truncated", step)
			}
			x, theta := b.FinalObs[0], b.FinalObs[2]
			if math.Abs(float64(x)) <= 2.4 && math.Abs(float64(theta)) <= 12*2*math.Pi/360 {
				t.Errorf("final observation %v is inside the thresholds", b.FinalObs)
			}
			if math.Abs(float64(b.Obs[0])) > 0.05 || math.Abs(float64(b.Obs[2])) > 0.05 {
				t.Errorf("observation after autoreset %v is not a reset state", b.Obs)
			}
			return
		}
	}
	t.Fatal("pushing right for 500 steps never terminated")
}

func TestParseSpace(t *testing.T) {
	tests := []struct {
		in   string
		want string // String of the parsed space; "" means an error
	}{
		{"discrete:2", "discrete:2"},
		{"box:1:-2:2", "box:1:-2:2"},
		{"box:2x3:0:1", "box:2x3:0:1"},
		{"box:2:-1.2,-0.07:0.6,0.07", "box:2:-1.2,-0.07:0.6,0.07"},
		{"box:2:-1,-1:1", "box:2:-1:1"},
		{"discrete:0", ""},
		{"discrete:x", ""},
		{"box:1:2:-2", ""},
		{"box:2:0,0,0:1", ""},
		{"box:0:0:1", ""},
		{"box:1:0", ""},
		{"tuple:2", ""},
	}
	for _, tt := range tests {
		sp, err := envs.ParseSpace(tt.in)
		if tt.want == "" {
			if !errors.Is(err, envs.ErrSpace) {
				t.Errorf("ParseSpace(%q) = %v, %v; want ErrSpace", tt.in, sp, err)
			}
			continue
		}
		if err != nil || sp.String() != tt.want {
			t.Errorf("ParseSpace(%q) = %v, %v; want %s", tt.in, sp, err, tt.want)
		}
	}
}

func TestClosed(t *testing.T) {
	v, err := envs.Make("MountainCar-v0", envs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := v.Reset(); !errors.Is(err, envs.ErrClosed) {
		t.Errorf("Reset after Close = %v, want ErrClosed", err)
	}
}

func ExampleMake() {
	v, err := envs.Make("CartPole-v1", envs.Config{NumEnvs: 4, Seed: 1})
	if err != nil {
		panic(err)
	}
	defer v.Close()
	if err := v.Reset(); err != nil {
		panic(err)
	}
	b := v.Buffers() // owned by v; refilled by every Step
	actions := envs.Actions{Discrete: make([]int, v.NumEnvs())}
	episodes := 0
	for range 1000 {
		// A policy would write actions here from b.Obs.
		if err := v.Step(actions); err != nil {
			panic(err)
		}
		for i := range v.NumEnvs() {
			if b.Terminated[i] == 1 || b.Truncated[i] == 1 {
				episodes++ // b.FinalObs row i is the episode's last observation
			}
		}
	}
	fmt.Println(episodes > 0, len(b.Obs))
	// Output: true 16
}

func ExampleNew() {
	env, err := envs.New("Pendulum-v1", 7)
	if err != nil {
		panic(err)
	}
	defer env.Close()
	if _, err := env.Reset(); err != nil {
		panic(err)
	}
	torque := []float32{0}
	steps := 0
	for {
		_, _, terminated, truncated, err := env.Step(envs.Actions{Box: torque})
		if err != nil {
			panic(err)
		}
		steps++
		if terminated || truncated {
			break
		}
	}
	fmt.Println(steps)
	// Output: 200
}

func ExampleParseSpace() {
	spec, _ := envs.Lookup("MountainCarContinuous-v0")
	fmt.Println(spec.Action, spec.Observation)
	sp, err := envs.ParseSpace("box:1:-2:2")
	fmt.Println(sp.Dim(), err)
	// Output:
	// box:1:-1:1 box:2:-1.2,-0.07:0.6,0.07
	// 1 <nil>
}

// TestCartPoleNoVelMasksVelocities steps CartPole-v1 and CartPoleNoVel-v1 side by side with the
// same seed and actions: every observation (final ones included) is CartPole's with entries 1
// and 3 set to 0 (RL Zoo's MaskVelocityWrapper), and rewards and episode ends are the same.
func TestCartPoleNoVelMasksVelocities(t *testing.T) {
	const n = 8
	full, err := envs.Make("CartPole-v1", envs.Config{NumEnvs: n, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	masked, err := envs.Make("CartPoleNoVel-v1", envs.Config{NumEnvs: n, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer masked.Close()
	check := func(step int) {
		t.Helper()
		f, m := full.Buffers(), masked.Buffers()
		for i := range n * 4 {
			want := f.Obs[i]
			if i%4 == 1 || i%4 == 3 {
				want = 0
			}
			if m.Obs[i] != want {
				t.Fatalf("step %d: obs[%d] = %v, want %v (CartPole's %v)", step, i, m.Obs[i], want, f.Obs[i])
			}
		}
		for i := range n {
			if f.Rewards[i] != m.Rewards[i] || f.Terminated[i] != m.Terminated[i] || f.Truncated[i] != m.Truncated[i] {
				t.Fatalf("step %d env %d: reward/terminated/truncated differ", step, i)
			}
			if f.Terminated[i]+f.Truncated[i] > 0 {
				for j := range 4 {
					want := f.FinalObs[4*i+j]
					if j == 1 || j == 3 {
						want = 0
					}
					if m.FinalObs[4*i+j] != want {
						t.Fatalf("step %d env %d: final obs[%d] = %v, want %v", step, i, j, m.FinalObs[4*i+j], want)
					}
				}
			}
		}
	}
	if err := full.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := masked.Reset(); err != nil {
		t.Fatal(err)
	}
	check(0)
	acts := make([]int, n)
	ends := 0
	for step := 1; step <= 2000; step++ {
		for i := range acts {
			acts[i] = (step*7 + i*3) % 5 % 2
		}
		if err := full.Step(envs.Actions{Discrete: acts}); err != nil {
			t.Fatal(err)
		}
		if err := masked.Step(envs.Actions{Discrete: acts}); err != nil {
			t.Fatal(err)
		}
		check(step)
		for _, d := range full.Buffers().Terminated {
			ends += int(d)
		}
	}
	if ends == 0 {
		t.Fatal("no episode ended; the test checks final observations too")
	}
}
