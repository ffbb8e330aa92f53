package algo_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/ppo"
)

// fake is an algorithm that only names itself.
type fake struct{ algo.Algorithm }

func (fake) Name() string { return "fake" }

func TestRegistry(t *testing.T) {
	algo.Register("fake", func(algo.Settings) (algo.Algorithm, error) { return fake{}, nil }, algo.Capabilities{Ranks: true})
	if names := algo.Names(); !slices.Contains(names, "fake") || !slices.Contains(names, ppo.Name) || !slices.IsSorted(names) {
		t.Fatalf("Names() = %v, want sorted with fake and ppo", names)
	}
	a, err := algo.New("fake", algo.Settings{})
	if err != nil || a.Name() != "fake" {
		t.Fatalf("New(fake) = %v, %v", a, err)
	}
	if c, ok := algo.CapabilitiesOf("fake"); !ok || c != (algo.Capabilities{Ranks: true}) {
		t.Errorf("CapabilitiesOf(fake) = %+v, %v; want what it registered", c, ok)
	}
	if c, ok := algo.CapabilitiesOf(ppo.Name); !ok || !c.OnPolicy || c.Ranks {
		t.Errorf("CapabilitiesOf(ppo) = %+v, %v; want on-policy, one rank", c, ok)
	}
	if c, ok := algo.CapabilitiesOf(ppo.DDPPOName); !ok || !c.OnPolicy || !c.Ranks {
		t.Errorf("CapabilitiesOf(ddppo) = %+v, %v; want on-policy over ranks", c, ok)
	}
	if _, ok := algo.CapabilitiesOf("sac"); ok {
		t.Error("CapabilitiesOf found an algorithm nobody registered")
	}
	_, err = algo.New("sac", algo.Settings{})
	if !errors.Is(err, algo.ErrUnknown) || !strings.Contains(err.Error(), "fake, ppo") {
		t.Fatalf("New(sac) = %v, want ErrUnknown listing the registered names", err)
	}
	p, err := algo.New(ppo.Name, algo.Settings{Gamma: 0.99, Lambda: 0.95, ClipCoef: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := p.(algo.Sequential); ok && s.Sequences() {
		t.Error("ppo asks for whole sequences")
	}
	if _, err := algo.New(ppo.Name, algo.Settings{Gamma: 2, Lambda: 0.9, ClipCoef: 0.2}); err == nil {
		t.Fatal("ppo accepted gamma 2")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second registration of one name did not panic")
			}
		}()
		algo.Register("fake", func(algo.Settings) (algo.Algorithm, error) { return fake{}, nil }, algo.Capabilities{Ranks: true})
	}()
}

func TestStatsByName(t *testing.T) {
	s := algo.Stats{Names: ppo.StatNames, Values: []float64{1, 2, 3, 4, 5, 6}}
	if s.Get("value_loss") != 3 || s.Get("clip_frac") != 6 {
		t.Fatalf("Get: %v %v", s.Get("value_loss"), s.Get("clip_frac"))
	}
	if !math.IsNaN(s.Get("rho_clip_frac")) {
		t.Fatal("a statistic the algorithm does not report is not NaN")
	}
}

// TestRegisterReplay: an off-policy algorithm's registration says Replay (and not OnPolicy),
// NewReplay makes its learner, and New — the on-policy loss — answers with an error saying how
// it is run; NewReplay of an on-policy or unknown name lists the off-policy ones.
func TestRegisterReplay(t *testing.T) {
	made := 0
	algo.RegisterReplay("fake-replay", func(s algo.ReplaySettings) (algo.ReplayLearner, error) {
		made++
		return nil, errors.New("made")
	}, func(s algo.ReplaySettings) error {
		if s.BufferSize < 1 {
			return errors.New("no buffer")
		}
		return nil
	}, algo.Capabilities{OnPolicy: true})
	if err := algo.CheckReplay("fake-replay", algo.ReplaySettings{}); err == nil || err.Error() != "no buffer" || made != 0 {
		t.Fatalf("CheckReplay: %v after %d learners made; want the check's error and none made", err, made)
	}
	if err := algo.CheckReplay("fake-replay", algo.ReplaySettings{BufferSize: 1}); err != nil {
		t.Fatalf("CheckReplay of good settings: %v", err)
	}
	if c, ok := algo.CapabilitiesOf("fake-replay"); !ok || !c.Replay || c.OnPolicy {
		t.Fatalf("CapabilitiesOf(fake-replay) = %+v, %v; want Replay only", c, ok)
	}
	if _, err := algo.NewReplay("fake-replay", algo.ReplaySettings{}); err == nil || err.Error() != "made" || made != 1 {
		t.Fatalf("NewReplay: %v after %d calls", err, made)
	}
	if _, err := algo.New("fake-replay", algo.Settings{}); err == nil || !strings.Contains(err.Error(), "replay buffer") {
		t.Fatalf("New(fake-replay) = %v, want an error saying it learns from a replay buffer", err)
	}
	if _, err := algo.NewReplay(ppo.Name, algo.ReplaySettings{}); !errors.Is(err, algo.ErrUnknown) || !strings.Contains(err.Error(), "fake-replay") {
		t.Fatalf("NewReplay(ppo) = %v, want ErrUnknown listing fake-replay", err)
	}
}
