package policy

import (
	"fmt"
	"strconv"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/internal/tape"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/onnx/graph"
)

// Recurrent fine-tuning: backpropagation through time over whole rollouts.
//
// The batchers run a recurrent policy one step at a time, carrying each env's state from one
// step to the next and zeroing it where an episode starts; a rollout records each env's state
// before its first step. A recurrent tower replays that: the imported one-step graph is built
// once per step of the rollout on one gorgonia graph over shared parameter nodes
// (graph.BuildOptions.Share), step t's state outputs feeding step t+1's state inputs through a
// mask that zeroes the envs whose episode ended at t. The PPO loss then reads every step's
// head outputs, and one backward pass gives the gradient through time. Sequences are whole
// rollouts of one env (the learner splits minibatches in whole sequences), so the replay sees
// exactly the states the batchers saw and the first epoch's probability ratios are 1.

// recurrentTower computes an algorithm's loss's gradient on an imported recurrent graph, unrolled
// over steps steps for seqs sequences. Loss row k is step k/seqs of sequence k%seqs
// (time-major); minibatch row s·steps+t is step t of sequence s.
type recurrentTower struct {
	f           *Foreign
	seqs, steps int
	first       *graph.Graph // step 0's build, whose parameter nodes every step shares
	vm          *tape.Machine
	obs         [][]float32   // per step: [seqs × obs] backing of the step's observation node
	state0      [][]float32   // per state: backing of its step-0 input, [state's shape with batch seqs]
	masks       [][][]float32 // per step t ≥ 1, per state: 1 − (episode of the row ended at t−1)
	starts      [][]float32   // per step t ≥ 1: the graph's episode_starts input, when it has one
	loss        *headLoss
	// Per state: its input's shape for seqs sequences, and one sequence's row of ones and of
	// zeros (the masks' rows); stateDim is their rows' total width.
	shapes      [][]int
	keep, reset [][]float32
	stateDim    int
}

// stateShape is state k's input shape for seqs sequences: its declared shape with the batch
// axis set to seqs.
func (f *Foreign) stateShape(k, seqs int) ([]int, error) {
	s := f.bind.State[k]
	shape := make([]int, len(s.Shape))
	for i, d := range s.Shape {
		switch {
		case i == s.BatchAxis:
			shape[i] = seqs
		case d <= 0:
			return nil, fmt.Errorf("%w: recurrent state %q has a dynamic dimension %d besides the batch (shape %v)", ErrFineTune, s.Input, i, s.Shape)
		default:
			shape[i] = int(d)
		}
	}
	return shape, nil
}

// stateDim is the number of values of one env's recurrent state, all states together: the
// width of learner.SampleBatch.State.
func (f *Foreign) stateDim() int {
	n := 0
	for k := range f.bind.State {
		shape, _ := f.stateShape(k, 1)
		n += tensor.Shape(shape).TotalSize()
	}
	return n
}

func newRecurrentTower(f *Foreign, seqs, steps int, a algo.Algorithm) (t *recurrentTower, err error) {
	if steps < 1 {
		return nil, fmt.Errorf("engine: a recurrent tower needs the rollout length, got %d", steps)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("engine: building the %s loss on the imported recurrent graph: %v", a.Name(), r)
		}
	}()
	t = &recurrentTower{f: f, seqs: seqs, steps: steps}
	u := &unroll{t: t, g: G.NewGraph(), shapes: map[string][]int{}, fixed: map[string]*G.Node{}}
	if err := u.initialStates(); err != nil {
		return nil, err
	}
	if err := u.constants(); err != nil {
		return nil, err
	}
	u.outs = f.outputs()
	for _, s := range f.bind.State {
		u.outs = append(u.outs, s.Output)
	}
	for step := range steps {
		gr, err := u.step(step)
		if err != nil {
			return nil, err
		}
		if step < steps-1 {
			if err := u.carry(gr, step); err != nil {
				return nil, err
			}
		}
	}
	params, logStd, values := u.heads()
	if t.loss, err = f.newHeadLoss(a, seqs*steps, params, logStd, values, t.first.Learnables()); err != nil {
		return nil, err
	}
	t.vm = tape.New(u.g, G.BindDualValues(t.loss.learn...))
	return t, nil
}

// unroll builds a recurrent tower's graph: the policy's graph once per step, every step
// sharing step 0's parameter nodes, each step's state the last one's output.
type unroll struct {
	t                       *recurrentTower
	g                       *G.ExprGraph
	shapes                  map[string][]int   // each state input's shape for the tower's sequences
	state                   []*G.Node          // each state's input node for the step being built
	fixed                   map[string]*G.Node // constant inputs (seq_lens ones, zeros), one node for every step
	outs                    []string           // the outputs each step builds: the head's, then the states'
	params, values, logStds []*G.Node          // each step's head outputs
}

// node is a new input node of the graph with its own backing, which the tower fills.
func (u *unroll) node(name string, shape []int) (*G.Node, []float32) {
	data := make([]float32, tensor.Shape(shape).TotalSize())
	v := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	return G.NewTensor(u.g, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(v)), data
}

// initialStates makes step 0's state inputs, which a minibatch fills with the recorded
// states, and each state's rows of ones and zeros for the masks.
func (u *unroll) initialStates() error {
	t, f := u.t, u.t.f
	u.state = make([]*G.Node, len(f.bind.State))
	for k, s := range f.bind.State {
		shape, err := f.stateShape(k, t.seqs)
		if err != nil {
			return err
		}
		u.shapes[s.Input] = shape
		var data []float32
		u.state[k], data = u.node("towerrl.state0."+s.Input, shape)
		t.state0 = append(t.state0, data)
		size := len(data) / t.seqs
		ones := make([]float32, size)
		for i := range ones {
			ones[i] = 1
		}
		t.shapes, t.keep, t.reset = append(t.shapes, shape), append(t.keep, ones), append(t.reset, make([]float32, size))
		t.stateDim += size
	}
	return nil
}

// constants makes the nodes of the graph's constant inputs (Foreign.consts).
func (u *unroll) constants() error {
	f := u.t.f
	for _, in := range f.model.Inputs() {
		v, ok := f.consts[in.Name]
		if !ok {
			continue
		}
		shape := []int{u.t.seqs}
		for _, d := range in.Shape[1:] {
			if d <= 0 {
				return fmt.Errorf("%w: input %q has a dynamic dimension besides the batch (shape %v)", ErrFineTune, in.Name, in.Shape)
			}
			shape = append(shape, int(d))
		}
		n, data := u.node("towerrl.const."+in.Name, shape)
		for i := range data {
			data[i] = v
		}
		u.fixed[in.Name] = n
	}
	return nil
}

// step builds the policy's graph for one step on its own observation (and episode-start)
// inputs and the step's state, keeping its head outputs.
func (u *unroll) step(step int) (*graph.Graph, error) {
	t, f, seqs := u.t, u.t.f, u.t.seqs
	ins := map[string]*G.Node{}
	for name, n := range u.fixed {
		ins[name] = n
	}
	obs, data := u.node("towerrl.obs."+strconv.Itoa(step), append([]int{seqs}, f.spec.ObsShape...))
	if od := obsSize(f.spec); len(data) != seqs*od {
		return nil, fmt.Errorf("engine: observation node of %d values for %d sequences of %d", len(data), seqs, od)
	}
	t.obs = append(t.obs, data)
	ins[f.input] = obs
	if f.bind.EpisodeStarts != "" {
		n, data := u.node("towerrl.starts."+strconv.Itoa(step), []int{seqs})
		ins[f.bind.EpisodeStarts] = n
		t.starts = append(t.starts, data) // step 0's stays 0: its state is the recorded one
	}
	for k, s := range f.bind.State {
		ins[s.Input] = u.state[k]
	}
	gr, err := f.model.BuildWith(u.g, f.params, graph.BuildOptions{Batch: seqs, Outputs: u.outs, Shapes: u.shapes, Inputs: ins, Share: t.first, StopGradient: f.stop})
	if err != nil {
		return nil, err
	}
	if t.first == nil {
		t.first = gr
	}
	p, err := gr.Output(f.outs.params)
	if err != nil {
		return nil, err
	}
	v, err := gr.Output(f.outs.value)
	if err != nil {
		return nil, err
	}
	// One row per sequence: an exporter's [batch, time = 1, width] (RLlib's inner tensors)
	// is taken as [batch, width].
	if p.Dims() > 2 && p.Shape()[0] == seqs {
		p = G.Must(G.Reshape(p, tensor.Shape{seqs, p.Shape().TotalSize() / seqs}))
	}
	u.params, u.values = append(u.params, p), append(u.values, v)
	if f.outs.logStd != "" && !f.outs.split {
		ls, err := gr.Output(f.outs.logStd)
		if err != nil {
			return nil, err
		}
		u.logStds = append(u.logStds, ls)
	}
	return gr, nil
}

// carry makes the next step's state: step's output gr, zeroed for the sequences whose
// episode ended at step (the batchers zero an env's state when its next episode starts).
func (u *unroll) carry(gr *graph.Graph, step int) error {
	var masks [][]float32
	for k, s := range u.t.f.bind.State {
		out, err := gr.Output(s.Output)
		if err != nil {
			return err
		}
		if !out.Shape().Eq(tensor.Shape(u.shapes[s.Input])) {
			return fmt.Errorf("%w: recurrent state output %q has shape %v, its input %q %v", ErrFineTune, s.Output, out.Shape(), s.Input, u.shapes[s.Input])
		}
		m, data := u.node(fmt.Sprintf("towerrl.mask.%d.%d", step+1, k), u.shapes[s.Input])
		masks = append(masks, data)
		u.state[k] = G.Must(G.HadamardProd(out, m))
	}
	u.t.masks = append(u.t.masks, masks)
	return nil
}

// heads joins the steps' head outputs, time-major: the means or logits, the log std (nil
// without one) and the values.
func (u *unroll) heads() (params, logStd, values *G.Node) {
	cat := func(nodes []*G.Node) *G.Node {
		if len(nodes) == 1 {
			return nodes[0]
		}
		return G.Must(G.Concat(0, nodes...))
	}
	if u.logStds != nil {
		// One row per sequence (it may depend on the observation) is joined like the means; a
		// shared [D] stays one (the same at every step).
		if logStd = u.logStds[0]; logStd.Dims() == 2 && logStd.Shape()[0] == u.t.seqs {
			logStd = cat(u.logStds)
		}
	}
	return cat(u.params), logStd, cat(u.values)
}

func (t *recurrentTower) StatNames() []string { return t.loss.names }
func (t *recurrentTower) Close() error        { return t.vm.Close() }

// Grad computes the PPO loss's gradient over mb's sequences into grads (the flat layout).
func (t *recurrentTower) Grad(mb *learner.SampleBatch, grads []float32, stats []float64) error {
	if len(mb.SeqLens) != t.seqs || mb.Len() != t.seqs*t.steps {
		return fmt.Errorf("engine: a recurrent PPO tower of %d sequences of %d steps got %d sequences, %d rows", t.seqs, t.steps, len(mb.SeqLens), mb.Len())
	}
	for s, l := range mb.SeqLens {
		if int(l) != t.steps {
			return fmt.Errorf("engine: sequence %d has %d steps; a recurrent PPO tower replays whole rollouts of %d", s, l, t.steps)
		}
	}
	if mb.StateDim != t.stateDim {
		return fmt.Errorf("engine: the batch carries %d state values per sequence, the policy %d", mb.StateDim, t.stateDim)
	}
	od := mb.ObsDim
	for step, obs := range t.obs {
		for s := range t.seqs {
			r := s*t.steps + step
			copy(obs[s*od:(s+1)*od], mb.Obs[r*od:(r+1)*od])
		}
	}
	// Each sequence's initial state, state by state, at its index on the state's batch axis.
	off := 0
	for k, s := range t.f.bind.State {
		size := len(t.keep[k])
		for seq := range t.seqs {
			src := mb.State[seq*mb.StateDim+off : seq*mb.StateDim+off+size]
			placeRow(t.state0[k], t.shapes[k], s.BatchAxis, seq, src)
		}
		off += size
	}
	for step := 1; step < t.steps; step++ {
		for s := range t.seqs {
			prev := s*t.steps + step - 1
			ended := mb.Terminated[prev] != 0 || mb.Truncated[prev] != 0
			if t.starts != nil {
				t.starts[step][s] = 0
				if ended {
					t.starts[step][s] = 1
				}
			}
			for k, st := range t.f.bind.State {
				row := t.keep[k]
				if ended {
					row = t.reset[k]
				}
				placeRow(t.masks[step-1][k], t.shapes[k], st.BatchAxis, s, row)
			}
		}
	}
	if err := t.loss.loss.Fill(mb, func(k int) int { return (k%t.seqs)*t.steps + k/t.seqs }); err != nil {
		return err
	}
	return t.loss.run(t.vm, t.first, grads, stats)
}
