package appo_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/appo"
)

// TestRegistered: the registry makes APPO by name, asking the trainer for whole sequences; it
// needs a positive clip coefficient and a KL coefficient ≥ 0.
func TestRegistered(t *testing.T) {
	a, err := algo.New(appo.Name, algo.Settings{Gamma: 0.99, Lambda: 1, ClipCoef: 0.2, KLCoef: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != appo.Name || !slices.Equal(a.StatNames(), appo.StatNames) {
		t.Errorf("Name %q, StatNames %v", a.Name(), a.StatNames())
	}
	for _, want := range []string{"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac"} {
		if !slices.Contains(a.StatNames(), want) {
			t.Errorf("no %q statistic for the trainer", want)
		}
	}
	if s, ok := a.(algo.Sequential); !ok || !s.Sequences() {
		t.Error("APPO does not ask for sequences")
	}
	for _, s := range []algo.Settings{{Gamma: 0.99, Lambda: 1}, {Gamma: 0.99, Lambda: 1, ClipCoef: 0.2, KLCoef: -1}} {
		if _, err := algo.New(appo.Name, s); err == nil {
			t.Errorf("APPO accepted %+v", s)
		}
	}
}

// APPO's statistics, as the trainer's metrics name them.
func Example() {
	a, err := algo.New("appo", algo.Settings{Gamma: 0.99, Lambda: 1, ClipCoef: 0.2, EntCoef: 0.01, VfCoef: 0.5})
	if err != nil {
		panic(err)
	}
	fmt.Println(a.Name(), a.StatNames())
	// Output: appo [loss policy_loss value_loss entropy approx_kl clip_frac rho_mean rho_clip_frac]
}
