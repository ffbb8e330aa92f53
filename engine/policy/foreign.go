package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/models/layout"
	"github.com/towerrl/towerrl/onnx"
	"github.com/towerrl/towerrl/onnx/edit"
	"github.com/towerrl/towerrl/onnx/graph"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Foreign is a pretrained ONNX policy imported for fine-tuning: its own graph and names, with
// its initializers as the trainable parameters, gathered in one flat vector. The head is bound
// as the batchers bind it (models/layout: the exporter's layout, towerrl metadata, or the
// names the user gave), so the tensors the loss reads may be inner tensors of the graph.
//
// A policy without a value output gets a new critic, which trains alone for the first
// ForeignOptions.ValueWarmup iterations (Schedule, BeginIteration) and starts from the first
// rollout's returns (Targets).
type Foreign struct {
	model  *graph.Model // the graph trained: the policy, its batch made dynamic when it was fixed
	orig   *graph.Model // the graph written back: the policy as given
	params *graph.Params
	flat   []float32
	spec   head.Spec      // the head the loss computes: a tanh-gaussian is a Gaussian over the pre-tanh action
	names  head.Names     // the outputs as the config named them (for the batchers' binding)
	bind   layout.Binding // what was recognised
	source []byte         // the model as loaded, kept in checkpoints so a resume needs no file
	input  string         // observation input
	outs   struct {
		params, logStd, value string
		split                 bool // params holds the mean then the log_std (RLlib)
	}
	// consts are the other inputs and the values they are fed (zeros, or ones for seq_lens).
	consts map[string]float32
	// warmup is the iterations a new critic trains alone (ForeignOptions.ValueWarmup).
	warmup int
	// stop names the tensors the loss's gradient does not flow back through: a new critic's
	// input when it reads the policy's features.
	stop []string
	// critic: the graph trained is the policy with a new critic (models.AddCritic); rewritten:
	// its batch was made dynamic. Either way the batchers run the graph trained, and
	// policy.onnx is orig written back with the trained weights, through origParams.
	critic, rewritten bool
	origParams        *graph.Params
	// actorFrozen zeroes the gradients of every parameter but the new critic's (the value
	// warm-up); set by the trainer between iterations, read by the towers.
	actorFrozen atomic.Bool
	warmedUp    atomic.Bool // the warm-up is over (set by the trainer, read by the schedule)
	actorRanges [][2]int
	criticBias  int    // index in flat of the critic's output bias
	criticOut   [2]int // range in flat of the critic's output weights
}

// ErrFineTune is wrapped by errors about a foreign policy that cannot be fine-tuned.
var ErrFineTune = errors.New("engine: cannot fine-tune this policy")

// ForeignOptions are how a foreign policy is imported: the user's names and head, which
// override what is recognised, the ONNX Runtime configuration the import's rewrites run with,
// and the new critic's initialisation and warm-up.
type ForeignOptions struct {
	Names   head.Names // the outputs the user named (zero: recognised)
	Head    head.Kind  // the head the user named ("": recognised)
	Session onnx.Config
	// Rand initialises a new critic (a policy without a value output).
	Rand *rand.Rand
	// ValueWarmup is the iterations a new critic trains alone before the actor moves (0:
	// none).
	ValueWarmup int
}

// LoadForeign imports data, an ONNX policy, for fine-tuning on an env whose head spec is
// spec, bound with the user's names and head (o). A policy without a value output gets a new
// critic, initialised from o.Rand. The bytes are kept: a checkpoint holds them (Source).
func LoadForeign(ctx context.Context, data []byte, spec head.Spec, o ForeignOptions) (*Foreign, error) {
	f, err := loadForeign(ctx, data, spec, layout.Overrides{Names: o.Names, Head: o.Head}, o.Session, o.Rand)
	if err != nil {
		return nil, err
	}
	f.source, f.warmup = data, o.ValueWarmup
	return f, nil
}

// loadForeign is LoadForeign with the overrides of models/layout and the new critic's rng.
func loadForeign(ctx context.Context, data []byte, spec head.Spec, o layout.Overrides, session onnx.Config, rng *rand.Rand) (*Foreign, error) {
	if session.Logger == nil {
		session.Logger = zap.NewNop()
	}
	mp, b, err := recognise(data, spec, o)
	if err != nil {
		return nil, err
	}
	notes := strings.Join(b.Notes, "; ")
	if b.Head == head.QValuesKind {
		// The batchers act greedily on Q-values (log-probability 0): PPO's ratios over them
		// would be meaningless.
		return nil, fmt.Errorf("%w: it is a Q-network (%s), which acts greedily on action values rather than sampling a distribution, so PPO cannot train it; to train its outputs as a policy's logits anyway, bind it with --head categorical",
			ErrFineTune, notes)
	}
	if b.DeterministicOnly {
		return nil, fmt.Errorf("%w: no action distribution could be found in the graph (%s); it runs in eval and batcher with --deterministic. Name the logits or the mean and log_std with --logits-output and --logstd-output if the graph computes them",
			ErrFineTune, notes)
	}
	orig, err := graph.New(mp)
	if err != nil {
		return nil, err
	}
	m, train := orig, data
	critic := b.Value == ""
	if critic {
		if m, train, err = withCritic(mp, &b, spec, session.Logger, rng); err != nil {
			return nil, err
		}
	}
	// A batch fixed at export is made dynamic for training; a dynamic model comes back as it is.
	dyn, rep, err := edit.DynamicBatch(ctx, train, edit.Options{Config: session})
	if err != nil {
		return nil, fmt.Errorf("%w: its batch is fixed and could not be made dynamic: %v", ErrFineTune, err)
	}
	if !rep.Dynamic {
		session.Logger.Info("fine-tuning: the policy's fixed batch was made dynamic", zap.String("report", rep.String()))
		if m, err = graph.Parse(dyn); err != nil {
			return nil, err
		}
	}
	f := &Foreign{model: m, orig: orig, origParams: orig.NewParams(), spec: spec, names: o.Names, bind: b, input: b.Observation,
		consts: map[string]float32{}, critic: critic, rewritten: !rep.Dynamic}
	if critic {
		f.stop = []string{models.CriticInput}
	}
	if f.spec.Head == head.TanhGaussianKind {
		f.spec.Head = head.GaussianKind // PPO over the pre-tanh action u (the batcher stores u and log N(u))
	}
	f.outs.params, f.outs.logStd, f.outs.value, f.outs.split = b.Params, b.LogStd, b.Value, b.Split
	if f.spec.Head == head.GaussianKind && f.outs.logStd == "" {
		return nil, fmt.Errorf("%w: the Gaussian head has no log_std in the graph (%s); name it with --logstd-output", ErrFineTune, notes)
	}
	if err := f.bindInputs(); err != nil {
		return nil, err
	}
	if err := f.trainables(); err != nil {
		return nil, err
	}
	session.Logger.Info("fine-tuning a foreign policy", zap.String("binding", notes),
		zap.Int("trainable", len(f.flat)), zap.Strings("frozen", f.params.Frozen()))
	return f, nil
}

// withCritic adds a new critic to a copy of mp, a graph with no value output (RLlib's export,
// actor-only policies), and binds b's value to it: PPO trains it from scratch (with a value
// warm-up before the actor moves), and policy.onnx stays the original graph. It returns the
// augmented graph and its bytes.
func withCritic(mp *onnxpb.ModelProto, b *layout.Binding, spec head.Spec, log *zap.Logger, rng *rand.Rand) (*graph.Model, []byte, error) {
	aug := proto.Clone(mp).(*onnxpb.ModelProto)
	in, width, reads := []string{b.Observation}, obsSize(spec), "the observations"
	if len(b.State) > 0 {
		// A recurrent policy's observations miss what its memory holds: the critic reads
		// the features its action layer reads as well, the value loss not flowing back
		// into them. (When it did, as RLlib's shared value branch does, the value loss's
		// gradient swamped the policy's: the RLlib LSTM and Sample Factory GRU fixtures
		// fell from 65 and 164 to 41–75 on CartPoleNoVel-v1.) The observations beside
		// them tell the critic what the actor's features may leave out — on
		// CartPoleNoVel, where the cart is, and so how near the episode is to its end:
		// the GRU fixture reached 461–494 on seeds 0–4 where the features alone gave
		// 299–492.
		if feat, w, ok := criticFeatures(mp, b.Params); ok {
			reads = "the recurrent features " + feat + " (the value loss not flowing back into them)"
			if b.Observation != "" {
				in, width, reads = []string{feat, b.Observation}, w+width, reads+" and the observations"
			} else {
				in, width = []string{feat}, w
			}
		}
	}
	if err := models.AddCritic(aug, in, width, []int{64, 64}, rng); err != nil {
		return nil, nil, fmt.Errorf("%w: adding a critic: %v", ErrFineTune, err)
	}
	train, err := proto.Marshal(aug)
	if err != nil {
		return nil, nil, err
	}
	m, err := graph.New(aug)
	if err != nil {
		return nil, nil, err
	}
	b.Value = models.CriticOutput
	b.Notes = append(b.Notes, "value: "+models.CriticOutput+", a new critic")
	log.Info("fine-tuning: the policy has no value output; training a new critic (64×64 tanh MLP on " + reads + ")")
	return m, train, nil
}

// bindInputs says what each graph input is fed: the observations, the recurrent states and
// episode starts, one step per sequence, and zeros for the rest.
func (f *Foreign) bindInputs() error {
	b := f.bind
	for _, in := range f.model.Inputs() {
		switch {
		case in.Name == f.input, in.Name == b.EpisodeStarts && b.EpisodeStarts != "",
			slices.ContainsFunc(b.State, func(s layout.State) bool { return s.Input == in.Name }):
		case in.Name == b.SeqLens:
			f.consts[in.Name] = 1 // one step per sequence and call
		default:
			f.consts[in.Name] = 0
		}
	}
	if f.input == "" {
		ins := f.model.Inputs()
		if len(ins) != 1 {
			return fmt.Errorf("%w: which of its %d inputs takes the observations was not recognised", ErrFineTune, len(ins))
		}
		f.input = ins[0].Name
	}
	return nil
}

// trainables makes the parameters PPO trains and their flat vector, and, with a new critic,
// where the actor's and the critic's lie in it.
func (f *Foreign) trainables() (err error) {
	// A SAC actor's log_std is a layer of its own, tuned by SAC's entropy-regularised
	// objective. PPO has no such term (no entropy bonus for Box actions), and its ratio's
	// gradient collapses that layer's σ through the wide trunk in tens of iterations (the SB3
	// SAC Pendulum fixture: σ 0.23 → 0.02 within 70 iterations, even at a third of the
	// learning rate); each step of the mean then moves the policy by (Δμ/σ)², and the
	// deterministic policy degrades (−194 → −515…−900). So PPO trains the mean and the trunk
	// only: the gradient does not flow back through the log_std tensor, and the parameters that
	// only it reads stay frozen. The batchers sample with SAC's σ as the trunk moves it.
	trainOuts := f.outputs()
	if f.bind.Head == head.TanhGaussianKind && f.outs.logStd != "" && !f.outs.split {
		f.stop = append(f.stop, f.outs.logStd)
		trainOuts = []string{f.outs.params, f.outs.value}
	}
	if f.params, err = f.model.NewParamsFor(graph.TrainOptions{Outputs: trainOuts}); err != nil {
		return err
	}
	if f.flat, err = f.params.Flat(); err != nil {
		return err
	}
	if !f.critic {
		return nil
	}
	// The flat ranges of every trainable parameter but the critic's.
	off := 0
	for _, name := range f.params.TrainableNames() {
		v, _ := f.params.Value(name)
		n := v.Shape().TotalSize()
		switch {
		case !strings.HasPrefix(name, models.CriticPrefix+"."):
			f.actorRanges = append(f.actorRanges, [2]int{off, off + n})
		case name == models.CriticBias:
			f.criticBias = off
		case name == models.CriticPrefix+".2.weight":
			f.criticOut = [2]int{off, off + n}
		}
		off += n
	}
	return nil
}

// recurrent reports whether the policy carries a state from one step to the next.
func (f *Foreign) recurrent() bool { return len(f.bind.State) > 0 }

// outputs are the tensors the loss reads.
func (f *Foreign) outputs() []string {
	outs := []string{f.outs.params, f.outs.value}
	if f.outs.logStd != "" && !f.outs.split {
		outs = append(outs, f.outs.logStd)
	}
	return outs
}

// Export writes the graph trained back with the current weights and towerrl.version =
// version: what the batchers run.
func (f *Foreign) Export(version int64) ([]byte, error) {
	return f.model.WriteBack(f.params, graph.WriteOptions{Version: strconv.FormatInt(version, 10)})
}

// Artifact is policy.onnx for the batchers' model (the export of version): the policy as it
// was given — its inputs, outputs, opset, names and batch — with the trained weights. A new
// critic is not part of it (it is in the checkpoint and in policy_with_critic.onnx).
func (f *Foreign) Artifact(model []byte, version int64) ([]byte, error) {
	if !f.critic && !f.rewritten {
		return model, nil
	}
	// The original graph's parameters are a subset of the graph trained (the same names and
	// shapes; the critic and the batch rewrite only add): write their trained values back
	// into the original with its own write-back.
	for _, name := range f.origParams.Names() {
		dst, _ := f.origParams.Value(name)
		src, ok := f.params.Value(name)
		if !ok || !src.Shape().Eq(dst.Shape()) {
			return nil, fmt.Errorf("engine: the trained graph has no parameter %q shaped %v as the policy's", name, dst.Shape())
		}
		copy(dst.Data().([]float32), src.Data().([]float32))
	}
	return f.orig.WriteBack(f.origParams, graph.WriteOptions{Version: strconv.FormatInt(version, 10)})
}

// recognise parses data, a foreign ONNX policy, and binds it as the batchers bind it: from the
// graph's declarations, with no probing session, so that a learner training it and the
// batchers running it bind the same tensors.
func recognise(data []byte, spec head.Spec, o layout.Overrides) (*onnxpb.ModelProto, layout.Binding, error) {
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		return nil, layout.Binding{}, fmt.Errorf("%w: not a readable ONNX model: %v", graph.ErrModel, err)
	}
	if err := checkObsInput(&mp, spec); err != nil {
		return nil, layout.Binding{}, err
	}
	b, err := layout.Recognise(&mp, nil, spec, o)
	if err != nil {
		return nil, layout.Binding{}, err
	}
	return &mp, b, nil
}

// checkObsInput refuses a policy none of whose graph inputs can take the env's observations:
// every input (initializers aside) declares rows of a known size, and none is the env's. A
// policy trained on another env was refused later, saying only that its head could not be
// recognised.
func checkObsInput(mp *onnxpb.ModelProto, spec head.Spec) error {
	g := mp.GetGraph()
	inits := map[string]bool{}
	for _, t := range g.GetInitializer() {
		inits[t.GetName()] = true
	}
	want := obsSize(spec)
	var seen []string
	for _, in := range g.GetInput() {
		if inits[in.GetName()] {
			continue
		}
		dims := in.GetType().GetTensorType().GetShape().GetDim()
		if len(dims) < 2 {
			return nil // a scalar or an unbatched input: nothing to tell from it
		}
		n := int64(1)
		for _, d := range dims[1:] {
			v, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue)
			if !ok || v.DimValue <= 0 {
				return nil // a dynamic size may be the env's
			}
			n *= v.DimValue
		}
		if n == int64(want) {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%q takes %d", in.GetName(), n))
	}
	if len(seen) == 0 {
		return nil
	}
	from := ""
	for _, p := range mp.GetMetadataProps() {
		if p.GetKey() == "towerrl.env_id" {
			from = fmt.Sprintf(" (it was trained on %s)", p.GetValue())
		}
	}
	return fmt.Errorf("%w: the observation sizes differ: the policy's input %s values per observation, %s gives %d%s; fine-tune a policy of %s, or train on the env the policy was made for",
		ErrFineTune, strings.Join(seen, ", the input "), spec.EnvID, want, from, spec.EnvID)
}

// obsSize is the number of values in one observation of spec.
func obsSize(spec head.Spec) int {
	n := 1
	for _, d := range spec.ObsShape {
		n *= d
	}
	return n
}

// startCritic sets a new critic to the first rollout's returns: its output bias to their mean,
// not 0 (a pretrained policy's returns can be far from 0, and Adam's steps of about lr would
// take thousands of updates to get there), and its output weights multiplied by their
// standard deviation, so that its hidden units need not saturate to follow returns of tens or
// hundreds.
func (f *Foreign) startCritic(returns []float32) {
	var mean, sq float64
	for _, r := range returns {
		mean += float64(r)
		sq += float64(r) * float64(r)
	}
	n := float64(len(returns))
	mean /= n
	f.flat[f.criticBias] += float32(mean)
	if sd := math.Sqrt(max(sq/n-mean*mean, 0)); sd > 1 {
		for i := f.criticOut[0]; i < f.criticOut[1]; i++ {
			f.flat[i] *= float32(sd)
		}
	}
}

// PublishLayout places f.flat's weights in the graph trained (the batchers' model), for
// Batcher.Publish: the trainable initializers in TrainableNames order.
func (f *Foreign) PublishLayout() []bind.Param {
	names := f.params.TrainableNames()
	sizes := make([]int, len(names))
	for i, name := range names {
		v, _ := f.params.Value(name)
		sizes[i] = v.Shape().TotalSize()
	}
	return bind.ContiguousParams(names, sizes)
}

// Trained is the graph the batchers run (model, the export) when it differs from policy.onnx:
// with a new critic. Nil otherwise.
func (f *Foreign) Trained(model []byte) []byte {
	if f.critic {
		return model
	}
	return nil
}

// Flat is the trainable parameters, in one vector the learner updates in place.
func (f *Foreign) Flat() []float32 { return f.flat }

// HeadSpec is the head the loss computes (a tanh-gaussian is a Gaussian over the pre-tanh
// action).
func (f *Foreign) HeadSpec() head.Spec { return f.spec }

// Binding is how the batchers bind the exports: the observation input, and the names the user
// gave, with the new critic's value output when there is one.
func (f *Foreign) Binding() Binding {
	b := Binding{Input: f.input, Names: f.names}
	if f.critic {
		b.Names.Value = models.CriticOutput
	}
	return b
}

// States are the recurrent states the policy carries from one step to the next (its inputs),
// none for a feed-forward policy.
func (f *Foreign) States() []State {
	var sts []State
	for k, st := range f.bind.State {
		shape, _ := f.stateShape(k, 1)
		n := 1
		for _, d := range shape {
			n *= d
		}
		sts = append(sts, State{Name: st.Input, Dim: n})
	}
	return sts
}

// Source is the policy as it was imported, which a checkpoint keeps so that a resume needs no
// file.
func (f *Foreign) Source() []byte { return f.source }

// Schedule is s, with a new critic's warm-up: the rate boosted while it trains alone, and
// the schedule carried on after it (warmupBoost).
func (f *Foreign) Schedule(s learner.Schedule, updatesPerIter int) learner.Schedule {
	if !f.critic || f.warmup <= 0 {
		return s
	}
	return &warmupBoost{Schedule: s, perIter: updatesPerIter, iters: f.warmup, factor: warmupLRFactor, after: &f.warmedUp}
}

// BeginIteration readies iteration it: a new critic trains alone for the first ValueWarmup
// iterations. Then Adam starts afresh: the actor's moments are still zero while its step
// count has run on, and bias correction by that count would make its first steps many times
// too large. The schedule carries on where it was (warmupBoost adds the warm-up's steps).
func (f *Foreign) BeginIteration(it int, opt learner.Optimizer) {
	if !f.critic {
		return
	}
	f.actorFrozen.Store(it < f.warmup)
	if it == f.warmup {
		for _, slot := range opt.State() {
			clear(slot)
		}
		opt.SetSteps(0)
	}
	f.warmedUp.Store(it >= f.warmup)
}

// Targets is handed iteration it's value targets before its update: a new critic starts from
// the first iteration's (startCritic).
func (f *Foreign) Targets(it int, returns []float32) {
	if f.critic && it == 0 {
		f.startCritic(returns)
	}
}
