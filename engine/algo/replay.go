package algo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// An off-policy algorithm (engine/dqn, engine/sac) learns from a replay buffer: the engine's
// off-policy loop collects a few env steps with the batchers, adds them to the buffer and
// runs several gradient steps on minibatches sampled from it. Its package registers a
// [ReplayFactory] with [RegisterReplay]; the registration's capabilities say Replay, and the
// engine chooses its off-policy loop from that, once, when a run starts.

// ReplaySettings are what an off-policy learner is made from: the env's sizes and the run's
// hyper-parameters (after the config's defaults).
type ReplaySettings struct {
	// ObsDim is the observation's values; Actions the number of a Discrete space's actions
	// (0 for a Box), ActDim a Box's dimensions (0 for a Discrete space).
	ObsDim, Actions, ActDim int
	Hidden                  []int
	Activation              string // "relu" or "tanh"
	Gamma, LR, AdamEps      float64
	// MaxGradNorm clips each step's gradient by global norm; 0 or negative: none.
	MaxGradNorm float64
	// Tau is the Polyak coefficient of the target networks; TargetEvery the interval of
	// their updates, in the algorithm's unit (env steps for dqn, as SB3 counts them; gradient
	// steps for sac).
	Tau         float64
	TargetEvery int
	Minibatch   int
	Towers      int
	// BufferSize is the replay buffer's capacity in transitions.
	BufferSize int
	NoSpin     bool
	// MaxTarget makes DQN bootstrap from max_a Q_target(s′, a) (SB3's target) instead of
	// Double DQN's.
	MaxTarget bool
	// EntCoef fixes SAC's α when positive; 0 tunes it automatically from 1 (SB3's "auto").
	EntCoef float64
	// UseSDE: SAC explores with gSDE, its log σ matrix starting at LogStdInit (0: SB3's −3);
	// its learner is then a NoisyActing.
	UseSDE     bool
	LogStdInit float64
	// Rng draws the initial weights.
	Rng *rand.Rand
	// Explore is DQN's ε-greedy schedule over the env steps collected; unused by a learner
	// that explores by sampling its policy (SAC).
	Explore LinearSchedule
	// Init, when not nil, is the acting network a fine-tune starts from (train --init-policy):
	// the foreign graph's weights, of the shape Hidden and Activation give.
	Init *InitNet
}

// InitNet is the acting network a fine-tune starts from: DQN's Q-network, or SAC's actor.
type InitNet struct {
	// Params are its parameters in engine/internal/mlp's layout (SAC's actor: its last layer
	// gives the mean, then the log std before its bound).
	Params []float32
	// LogStdMin and LogStdMax bound SAC's log std as the graph clips it.
	LogStdMin, LogStdMax float64
	// InitAlpha is the α SAC's tuning starts from (EntCoef 0) in place of 1.
	InitAlpha float64
	// CriticWarmup is the updates SAC's new critics take alone, the actor and α held, before
	// the actor moves: critics drawn at random would pull a trained actor anywhere.
	CriticWarmup int
}

// LinearSchedule is a rate that goes linearly from Initial to Final over the first Fraction
// of Total env steps, then stays at Final (SB3's linear schedule of DQN's ε).
type LinearSchedule struct {
	Initial, Final, Fraction float64
	Total                    int64
}

// At is the rate after steps env steps.
func (s LinearSchedule) At(steps int64) float64 {
	progress := min(1, float64(steps)/(s.Fraction*float64(s.Total)))
	return s.Initial + progress*(s.Final-s.Initial)
}

// ReplayLearner is an off-policy algorithm's networks, optimisers and update as the engine's
// loop drives it. It belongs to the loop's goroutine.
type ReplayLearner interface {
	// StatNames names the statistics Update reports, in order; the loop writes their means
	// over an iteration's updates into the metrics (TensorBoard: losses/<name>).
	StatNames() []string
	// Add puts one step of every env into the learner's replay buffer (engine/replay's
	// Buffer.Add: the step's observations, the actions as the batchers report them, rewards,
	// terminated and truncated flags, the observations after it and the final observations of
	// the episodes that ended); the learner keeps the actions in its own form (SAC: tanh of its
	// raw draws).
	Add(obs, act, rew, term, trunc, next, final []float32) error
	// Buffered is the transitions in the replay buffer, the bytes of its snapshot now, and
	// when full.
	Buffered() (n int, now, full int64)
	// Update samples a minibatch uniformly from the buffer with rng, takes one gradient step on
	// it, drawing any noise from rng too, and writes its statistics into stats
	// (len(StatNames()) values).
	Update(ctx context.Context, rng *rand.Rand, stats []float64) error
	// Collected tells the learner the env steps collected so far, after each collection
	// (DQN moves its target network every TargetEvery env steps, as SB3 does).
	Collected(steps int64)
	// Acting is the parameters of the network the batchers act with, laid out as
	// PublishLayout places them in Export's graph; the loop publishes them in place.
	Acting() []float32
	PublishLayout() []bind.Param
	// Head is the head the acting network's export carries: qvalues or tanh-gaussian.
	Head() head.Kind
	// Exploration is the rate the batchers explore with once learning has started, after
	// steps env steps: DQN's ε (ReplaySettings.Explore), with ok; ok is false for a learner
	// that explores by sampling its own policy (SAC), whose rate is then 0. (Before
	// LearningStarts the loop acts uniformly at random, rate 1, for every learner.)
	Exploration(steps int64) (rate float64, ok bool)
	// Export is the acting network (policy.onnx) as policy version version, with spec's env,
	// observation shape and action space.
	Export(spec head.Spec, version int64) ([]byte, error)
	// Store puts the networks, optimisers and counters into a checkpoint, and the replay
	// buffer with withBuffer; Load restores them, so that a resumed learner takes the same
	// steps bit for bit (buffer: the checkpoint held the buffer; without it the learner
	// resumes with an empty one).
	Store(c *models.Checkpoint, withBuffer bool) error
	Load(c *models.Checkpoint) (buffer bool, err error)
	// Close stops the learner's towers.
	Close() error
}

// NoisyActing is a ReplayLearner whose batchers act with a graph of their own, not its
// Export: SAC with gSDE, whose acting graph adds noise that is a function of the state, drawn
// as a matrix that travels with the published weights (its part of Acting and
// PublishLayout). The loop binds the batchers to ExportActing, evaluates Export (policy.onnx),
// and calls ResampleNoise before publishing at each collection's start (and every
// sde_sample_freq steps within one).
type NoisyActing interface {
	ReplayLearner
	// ExportActing is the acting graph, its weights laid out as PublishLayout says.
	ExportActing(spec head.Spec, version int64) ([]byte, error)
	// ResampleNoise draws the acting noise anew from rng, into Acting.
	ResampleNoise(rng *rand.Rand)
}

// ReplayFactory makes an off-policy learner.
type ReplayFactory func(ReplaySettings) (ReplayLearner, error)

// ReplayCheck says whether settings would make a learner, allocating nothing: an error names
// the setting at fault (say, a buffer larger than the memory available).
type ReplayCheck func(ReplaySettings) error

type replayRegistration struct {
	f     ReplayFactory
	check ReplayCheck
}

var replayRegistry = map[string]replayRegistration{}

// RegisterReplay makes an off-policy algorithm available under name: its Capabilities get
// Replay, and its on-policy Factory (New) answers with an error saying how it is run. It
// panics as Register does.
func RegisterReplay(name string, f ReplayFactory, check ReplayCheck, caps Capabilities) {
	if f == nil || check == nil {
		panic("algo: RegisterReplay with a nil factory or check")
	}
	caps.Replay, caps.OnPolicy = true, false
	Register(name, func(Settings) (Algorithm, error) {
		return nil, fmt.Errorf("algo: %s learns from a replay buffer; the engine runs it with its off-policy loop (NewReplay), not as an on-policy loss", name)
	}, caps)
	mu.Lock()
	defer mu.Unlock()
	replayRegistry[name] = replayRegistration{f: f, check: check}
}

// NewReplay makes the off-policy learner registered under name.
func NewReplay(name string, s ReplaySettings) (ReplayLearner, error) {
	r, err := replayOf(name)
	if err != nil {
		return nil, err
	}
	return r.f(s)
}

// CheckReplay checks settings for the off-policy learner registered under name, allocating
// nothing (see ReplayCheck).
func CheckReplay(name string, s ReplaySettings) error {
	r, err := replayOf(name)
	if err != nil {
		return err
	}
	return r.check(s)
}

func replayOf(name string) (replayRegistration, error) {
	mu.RLock()
	r, ok := replayRegistry[name]
	mu.RUnlock()
	if !ok {
		var names []string
		for _, n := range Names() {
			if c, _ := CapabilitiesOf(n); c.Replay {
				names = append(names, n)
			}
		}
		return r, fmt.Errorf("%w %q among the off-policy algorithms; registered: %s", ErrUnknown, name, strings.Join(names, ", "))
	}
	return r, nil
}
