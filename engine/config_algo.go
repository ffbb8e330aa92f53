package engine

import (
	"fmt"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/envs"
)

// What a Config makes beyond its fields: the algorithm from the registry, the binding of a
// foreign policy, and the length of the sequences the learner trains on.

// binding is how a foreign InitPolicy's head is bound: the env's action space, with Head,
// ActionSpace and the output names the config gives.
func (c Config) binding(env envs.Spec) (policy.Head, error) {
	return policy.BindHead(c.Env, env, policy.HeadOptions{Head: c.Head, ActionSpace: c.ActionSpace,
		Logits: c.LogitsOutput, LogStd: c.LogStdOutput, Value: c.ValueOutput, Invalid: ErrConfig})
}

// algorithm makes the run's algorithm from the registry.
func (c Config) algorithm() (algo.Algorithm, error) {
	a, err := algo.New(c.Algo, algo.Settings{Gamma: c.Gamma, Lambda: c.Lambda, ClipCoef: c.ClipCoef, ClipVLoss: !c.NoClipVLoss,
		EntCoef: c.EntCoef, VfCoef: c.VfCoef, RhoBar: c.RhoBar, CBar: c.CBar, KLCoef: c.KLCoef,
		NormalizeAdvantages: !c.NoNormAdv})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return a, nil
}

// probe makes the algorithm registered under name with valid placeholder settings, to ask it
// what it is (nil when none is registered).
func probe(name string) algo.Algorithm {
	a, err := algo.New(name, algo.Settings{Gamma: 0.99, Lambda: 1, ClipCoef: 0.2, VfCoef: 0.5, RhoBar: 1, CBar: 1})
	if err != nil {
		return nil
	}
	return a
}

// algoDefaults are the defaults of the algorithm registered under name (algo.Defaulter), if
// it has its own.
func algoDefaults(name string, discrete bool) (algo.Defaults, bool) {
	d, ok := probe(name).(algo.Defaulter)
	if !ok {
		return algo.Defaults{}, false
	}
	return d.Defaults(discrete), true
}

// capabilities are those the algorithm registered under name declared (none when no package
// registered it).
func capabilities(name string) algo.Capabilities {
	c, _ := algo.CapabilitiesOf(name)
	return c
}

// rankedAlgos lists the registered algorithms that train across the ranks of an MPI job.
func rankedAlgos() []string {
	var names []string
	for _, n := range algo.Names() {
		if capabilities(n).Ranks {
			names = append(names, n)
		}
	}
	return names
}

// sequential reports whether the algorithm registered under name trains on whole sequences
// (algo.Sequential: V-trace's impala and appo), run asynchronously by the trainer.
func sequential(name string) bool {
	s, ok := probe(name).(algo.Sequential)
	return ok && s.Sequences()
}

// seqLen is the sequence length: SeqLen, or the largest divisor of RolloutSteps up to
// recurrentSeqLen for a recurrent policy's backpropagation through time (ppo, ddppo), up to
// 32 for V-trace's sequences (impala, appo).
func (c Config) seqLen() int {
	if c.SeqLen > 0 {
		return c.SeqLen
	}
	limit := 32
	if !sequential(c.Algo) {
		limit = recurrentSeqLen
	}
	return largestDivisor(c.RolloutSteps, limit)
}

// largestDivisor is the largest divisor of n up to limit (at least 1).
func largestDivisor(n, limit int) int {
	for l := min(limit, n); l > 1; l-- {
		if n%l == 0 {
			return l
		}
	}
	return 1
}

// recurrentSeqLen bounds the default length of the sequences a recurrent policy is unrolled
// over. The memory itself is not cut by it: every sequence is replayed from the state the
// batcher fed at its first step, so only the gradient's reach back in time is. Each step is
// one more copy of the imported graph in the learner's unrolled tower, whose cost per update
// is the per-node overhead of those copies far more than their arithmetic: 8 steps instead of
// 32 fine-tune the CartPoleNoVel LSTM and GRU fixtures 2–2.5× faster, to returns as good
// (seed 1, 200k steps: 500 and 337 against 326 and 262).
// RLlib's max_seq_len is 20; tasks whose memory must be learnt over longer gaps set SeqLen.
const recurrentSeqLen = 8
