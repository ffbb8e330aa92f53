// Package algo is what the engine's trainer needs from a learning algorithm, and the registry
// that maps a run's Config.Algo to one.
//
// The trainer owns the policy (towerrl's own MLPs or an imported ONNX graph, feed-forward or
// recurrent), the batchers and the learner's towers. Each tower builds the policy's forward
// pass for its rows on a gorgonia graph and hands its head outputs ([Heads]) to the
// algorithm, which adds its loss ([Algorithm.Loss]); the tower differentiates it and runs it
// on every minibatch. Before training on a rollout the trainer asks the algorithm for the
// rows' training targets ([Algorithm.Targets]: PPO's GAE advantages and returns).
//
// An algorithm whose loss needs whole time-ordered sequences (V-trace's IMPALA and APPO, which
// recompute their targets under the current policy at every minibatch) implements
// [Sequential]; the trainer then gives each tower whole sequences and says so in
// [Heads.SeqLen], and fills the batch's NextValues (see learner.SampleBatch).
//
// An algorithm is added by one package that calls [Register] from its init function (see
// package engine/ppo), declaring its [Capabilities]. The engine names no algorithm: a program
// links the ones towerrl ships with a blank import of package engine/algos, and adds its own
// with a blank import of their packages.
//
// Threading: Register is safe for concurrent use; an Algorithm's Targets is called from the
// trainer's goroutine, each Loss from one tower's goroutine and used only by it.
package algo

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"

	G "gorgonia.org/gorgonia"

	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models/head"
)

// ErrUnknown is wrapped by the error of New for a name no package registered.
var ErrUnknown = errors.New("algo: unknown algorithm")

// Settings are the hyper-parameters an algorithm reads (from the run's config; zero values
// mean what the config's defaults made them, except where a field says otherwise).
type Settings struct {
	Gamma, Lambda float64 // discount, and GAE's (or V-trace's) λ
	ClipCoef      float64 // PPO's and APPO's ε
	ClipVLoss     bool    // clip the value update around the old value (PPO)
	EntCoef       float64 // weight of the entropy bonus
	VfCoef        float64 // weight of the value loss
	// RhoBar (ρ̄) and CBar (c̄) clip V-trace's importance weights π/μ in its TD terms and its
	// traces (IMPALA, APPO); 0 means IMPALA's 1.
	RhoBar, CBar float64
	// KLCoef weighs APPO's KL(μ‖π) penalty between the behaviour and the current policy;
	// 0 (the default) leaves it out.
	KLCoef float64
	// NormalizeAdvantages asks a loss that computes its own advantages (V-trace's) to
	// standardise them over its rows, as the learner does with PPO's per minibatch
	// (learner.TowersConfig.NormalizeAdvantages), which such losses do not read.
	NormalizeAdvantages bool
}

// Heads are a policy's outputs for one tower of Rows rows: what a loss reads. Params holds
// the logits ([Rows, N], categorical) or the mean ([Rows, D], Gaussian; a tanh-gaussian head
// is trained as the Gaussian over its pre-tanh action); LogStd the Gaussian's log standard
// deviation, [Rows, D] (nil for a categorical head); Value the state value, [Rows] or
// [Rows, 1]. Every node is in one gorgonia graph.
//
// SeqLen > 0 says the loss rows are Rows/SeqLen whole sequences of SeqLen consecutive time
// steps of one env each (what an algorithm that is [Sequential] asks for): sequence s's step
// t is loss row s·SeqLen+t, or t·(Rows/SeqLen)+s when TimeMajor is set (the order of a
// recurrent tower's unrolled steps). SeqLen 0 (the default) means rows in no particular
// order.
type Heads struct {
	Spec                  head.Spec
	Rows                  int
	Params, LogStd, Value *G.Node
	SeqLen                int
	TimeMajor             bool
}

// Sequential is implemented by an algorithm whose loss reads whole time-ordered sequences
// (V-trace's IMPALA and APPO). When Sequences reports true the trainer fills the learner's
// batch with whole sequences of each env's rollout (learner.NewSequenceBatch, with
// NextValues), splits minibatches over towers by whole sequences, and tells each tower's
// loss the sequences' length (Heads.SeqLen). Without sequences such an algorithm still
// trains, on the targets its Targets wrote.
type Sequential interface {
	Sequences() bool
}

// RowMean is implemented by an algorithm whose loss, and each of its statistics, is a mean over
// the loss's rows of terms that each read one row alone (PPO's: the learner standardises the
// advantages over the whole minibatch before the towers see them). A tower may then compute a
// large slice of rows in parts that fit the CPU's cache and weigh the parts' gradients and
// statistics by their rows: the same loss, its sums taken in another order.
type RowMean interface {
	RowMean()
}

// ColumnReader is implemented by an algorithm whose losses' Fill reads only some of a
// minibatch's columns besides its observations and actions (which every tower reads): the
// learner then gathers only those, and these, into a tower's rows. An algorithm that does
// not implement it gets every column.
type ColumnReader interface {
	Columns() learner.Columns
}

// Defaults are an algorithm's own defaults for the run's hyper-parameters that are not
// PPO's (CleanRL's, the engine's defaults); zero fields keep the engine's.
type Defaults struct {
	TotalSteps          int64   // env steps of a run
	Epochs, Minibatches int     // passes over each rollout and minibatches per pass
	LR, Lambda          float64 // learning rate; GAE's or V-trace's λ
	// SeqLen bounds the sequences (algo.Sequential) a run that sets none is cut into: the
	// largest divisor of the rollout's steps up to SeqLen.
	SeqLen int
}

// Defaulter is implemented by an algorithm whose defaults differ from PPO's: the engine's
// config applies them to the fields a run leaves at zero, for a Discrete or a Box action
// space.
type Defaulter interface {
	Defaults(discrete bool) Defaults
}

// Loss is an algorithm's loss over one tower's Heads.
type Loss interface {
	// Node is the scalar loss node, to differentiate.
	Node() *G.Node
	// Fill writes the loss's per-row inputs (actions, targets, behaviour log-probabilities
	// and values) before a run: loss row k from minibatch row rowOf(k).
	Fill(mb *learner.SampleBatch, rowOf func(k int) int) error
	// Stats writes the last run's statistics, in the algorithm's StatNames order.
	Stats(dst []float64)
	// LogProbs are the last run's log-probabilities of the taken actions, per loss row.
	LogProbs() []float32
}

// Rollout is a time-major rollout's columns an algorithm's targets read: row t·N+i is step t
// of env i ([T×N]; LastValues [N], the value of the observation after the last step).
// FinalValues holds the value of the final observation where an episode was truncated.
type Rollout struct {
	T, N                                                int
	Rewards, Values, Terminated, Truncated, FinalValues []float32
	LastValues                                          []float32
}

// Algorithm is a learning algorithm as the trainer drives it.
type Algorithm interface {
	// Name is the name it is registered under (Config.Algo).
	Name() string
	// StatNames names the statistics its losses report, in order. The trainer reads
	// "loss", "policy_loss", "value_loss", "entropy", "approx_kl" and "clip_frac" when
	// present; others are the algorithm's own.
	StatNames() []string
	// Targets writes each row's advantage and return (the value target) of r, time-major.
	Targets(r Rollout, adv, ret []float32) error
	// Loss adds the loss over h to h's graph. Gorgonia's panics are the caller's to recover.
	Loss(h Heads) (Loss, error)
}

// Factory makes an algorithm from the run's settings.
type Factory func(Settings) (Algorithm, error)

// Capabilities are what an algorithm's registration tells the trainer and the tools about how
// it is run, before any run makes one: the tools decide from them (cmd/train joins an MPI job
// for an algorithm that trains across ranks, feeds an on-policy one a single rollout per
// version), never from the algorithm's name.
//
// An off-policy algorithm (engine/dqn, engine/sac over engine/replay) registers with
// [RegisterReplay], which sets Replay: the engine then runs its own off-policy loop, chosen
// once when the run starts, as it chooses the asynchronous ring from [Sequential].
type Capabilities struct {
	// OnPolicy: the algorithm trains only on rows of the policy version being trained (ppo,
	// ddppo); a rollout of an older version is dropped, and the collectors get every
	// version. Otherwise the loss corrects for the lag (impala, appo).
	OnPolicy bool
	// Ranks: the algorithm trains as one rank of an MPI job of several (ddppo): every rank
	// collects with its own batchers and the gradients are averaged across the ranks.
	// Only such an algorithm takes Options.Ranks of more than one rank.
	Ranks bool
	// Replay: the algorithm learns from a replay buffer (dqn, sac: registered with
	// [RegisterReplay], made with [NewReplay]). The engine runs it with its off-policy loop,
	// chosen once when a run starts: collections of train_freq env steps into the buffer, each
	// followed by gradient_steps updates on minibatches sampled from it.
	Replay bool
}

type registration struct {
	f    Factory
	caps Capabilities
}

var (
	mu       sync.RWMutex
	registry = map[string]registration{}
)

// Register makes an algorithm available under name, with what the tools and the trainer are
// to know about it. It panics when name is empty or taken: registration happens in init
// functions, where two algorithms claiming one name is a programming error.
func Register(name string, f Factory, caps Capabilities) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || f == nil {
		panic("algo: Register with an empty name or a nil factory")
	}
	if _, dup := registry[name]; dup {
		panic("algo: Register called twice for " + name)
	}
	registry[name] = registration{f: f, caps: caps}
}

// CapabilitiesOf returns the capabilities the algorithm registered under name declared; ok is
// false when no package registered it.
func CapabilitiesOf(name string) (caps Capabilities, ok bool) {
	mu.RLock()
	defer mu.RUnlock()
	r, ok := registry[name]
	return r.caps, ok
}

// Names lists the registered algorithms, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New makes the algorithm registered under name.
func New(name string, s Settings) (Algorithm, error) {
	mu.RLock()
	r, ok := registry[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q; registered: %s", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	return r.f(s)
}

// Stats are one update's statistics by name.
type Stats struct {
	Names  []string
	Values []float64
}

// Get returns the statistic called name, NaN when the algorithm does not report it.
func (s Stats) Get(name string) float64 {
	if i := slices.Index(s.Names, name); i >= 0 && i < len(s.Values) {
		return s.Values[i]
	}
	return math.NaN()
}
