// Package impala is IMPALA's V-trace actor-critic (Espeholt et al. 2018, section 4.2): the
// policy gradient −ρ̂_s·A_s·log π with A_s = r_s + γ·v_{s+1} − V(x_s) and ρ̂_s = min(ρ̄, π/μ),
// the value regressed to the V-trace targets v_s, and an entropy bonus, computed per
// minibatch under the current policy over whole time-ordered sequences. It registers itself
// with package engine/algo as "impala"; the loss itself (shared with APPO) is described in
// engine/internal/vtraceloss.
//
// Settings read: Gamma, Lambda (V-trace's λ; the paper's V-trace is λ = 1), RhoBar and CBar
// (0 means 1), EntCoef, VfCoef. The trainer must give the losses whole sequences
// (algo.Sequential) with learner.SampleBatch.NextValues filled.
//
// Threading: an Algorithm may be shared; each Loss belongs to one tower's goroutine.
package impala

import (
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/vtraceloss"
)

func init() { algo.Register(Name, New, algo.Capabilities{}) }

// Name is the name IMPALA is registered under.
const Name = "impala"

// StatNames are the statistics of each update, in order: the loss, its policy, value and
// entropy terms, the approximate KL(μ‖π) (mean of (ρ − 1) − log ρ), the mean importance
// weight ρ = π/μ and the fraction of rows whose ρ exceeds ρ̄.
var StatNames = vtraceloss.IMPALA.StatNames()

// New makes IMPALA from the run's settings.
func New(s algo.Settings) (algo.Algorithm, error) { return vtraceloss.New(vtraceloss.IMPALA, s) }
