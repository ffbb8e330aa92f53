// Package appo is asynchronous PPO as RLlib and Sample Factory define it: PPO's clipped
// surrogate with the ratio r = π/μ of the current to the behaviour policy, on V-trace
// policy-gradient advantages, the value regressed to the V-trace targets, an entropy bonus
// and an optional KL(μ‖π) penalty, computed per minibatch under the current policy over whole
// time-ordered sequences. It registers itself with package engine/algo as "appo"; the loss
// itself (shared with IMPALA) is described in engine/internal/vtraceloss.
//
// Settings read: Gamma, Lambda (V-trace's λ), RhoBar and CBar (0 means 1), ClipCoef (ε),
// EntCoef, VfCoef, KLCoef (0, the default, leaves the KL term out). ClipVLoss is ignored. The
// trainer must give the losses whole sequences (algo.Sequential) with
// learner.SampleBatch.NextValues filled.
//
// Threading: an Algorithm may be shared; each Loss belongs to one tower's goroutine.
package appo

import (
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/internal/vtraceloss"
)

func init() { algo.Register(Name, New, algo.Capabilities{}) }

// Name is the name APPO is registered under.
const Name = "appo"

// StatNames are the statistics of each update, in order: the loss, its policy, value and
// entropy terms, the approximate KL(μ‖π) (mean of (r − 1) − log r), the fraction of rows whose
// ratio left [1 − ε, 1 + ε], the mean importance weight and the fraction above ρ̄.
var StatNames = vtraceloss.APPO.StatNames()

// New makes APPO from the run's settings.
func New(s algo.Settings) (algo.Algorithm, error) { return vtraceloss.New(vtraceloss.APPO, s) }
