package impala_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/impala"
)

// TestRegistered: the registry makes IMPALA by name, with V-trace's defaults filled, asking
// the trainer for whole sequences; IMPALA needs no clip coefficient.
func TestRegistered(t *testing.T) {
	if !slices.Contains(algo.Names(), impala.Name) {
		t.Fatalf("algo.Names() = %v, no %q", algo.Names(), impala.Name)
	}
	a, err := algo.New(impala.Name, algo.Settings{Gamma: 0.99, Lambda: 1, EntCoef: 0.01, VfCoef: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if a.Name() != impala.Name || !slices.Equal(a.StatNames(), impala.StatNames) || slices.Contains(a.StatNames(), "clip_frac") {
		t.Errorf("Name %q, StatNames %v", a.Name(), a.StatNames())
	}
	if s, ok := a.(algo.Sequential); !ok || !s.Sequences() {
		t.Error("IMPALA does not ask for sequences")
	}
	if _, err := algo.New(impala.Name, algo.Settings{Gamma: 0.99, Lambda: 1.5}); err == nil {
		t.Error("lambda 1.5 accepted")
	}
}

// IMPALA's statistics, as the trainer's metrics name them.
func Example() {
	a, err := algo.New("impala", algo.Settings{Gamma: 0.99, Lambda: 1, RhoBar: 1, CBar: 1, EntCoef: 0.01, VfCoef: 0.5})
	if err != nil {
		panic(err)
	}
	fmt.Println(a.Name(), a.StatNames())
	// Output: impala [loss policy_loss value_loss entropy approx_kl rho_mean rho_clip_frac]
}
