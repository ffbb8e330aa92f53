package layout

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/towerrl/towerrl/models/head"
	"github.com/towerrl/towerrl/onnx/onnxpb"
)

// Module names (path tokens, as torch names parameters and nodes) of each role, most
// specific first: SB3, SB3 SAC, CleanRL, RLlib, Sample Factory, then generic ones.
var (
	paramsScopes = []string{"action_net", "mu", "fc_mean", "actor_mean", "_logits", "_logits_branch",
		"logits", "distribution_linear", "action_head", "policy_head", "mean", "pi", "actor"}
	logStdScopes = []string{"log_std", "logstd", "actor_logstd", "fc_logstd", "log_sigma"}
	valueScopes  = []string{"value_net", "_value_branch", "critic_linear", "value_head", "v_head", "vf",
		"critic", "value", "v", "baseline"}
)

// inputs sorts the graph inputs into observation, recurrent states, seq_lens, episode starts
// and zeros.
func (r *recogniser) inputs() {
	x, b := r.x, &r.b
	var rest []string
	for _, name := range x.inputs {
		low := strings.ToLower(name)
		switch {
		case b.SeqLens == "" && strings.Contains(low, "seq_len"):
			b.SeqLens = name
			r.note("input %s takes sequence lengths (fed ones)", name)
		case b.EpisodeStarts == "" && (strings.Contains(low, "episode_start") || slices.Contains([]string{"dones", "done", "is_first", "first", "resets", "reset"}, low)):
			b.EpisodeStarts = name
			r.note("input %s takes episode starts", name)
		default:
			rest = append(rest, name)
		}
	}
	used := map[string]bool{}
	passed := map[string]string{} // dummy states the graph passes through unchanged
	pair := func(in, out, why string) {
		if x.back(out, throughShape) == in {
			passed[in] = out
			used[in], used[out] = true, true
			return
		}
		t := x.tensor(in)
		s := State{Input: in, Output: out, Shape: slices.Clone(t.shape), BatchAxis: batchAxis(t.shape)}
		b.State = append(b.State, s)
		used[in], used[out] = true, true
		r.note("recurrent state %s → %s, batch on axis %d (%s)", in, out, s.BatchAxis, why)
	}
	// The initial and final states of recurrent nodes, traced to graph inputs and outputs.
	for _, n := range x.nodes {
		switch n.GetOpType() {
		case "LSTM", "GRU", "RNN":
		default:
			continue
		}
		in, out := n.GetInput(), n.GetOutput()
		for _, k := range [][2]int{{5, 1}, {6, 2}} {
			if k[0] >= len(in) || in[k[0]] == "" || k[1] >= len(out) || out[k[1]] == "" {
				continue
			}
			src := x.stateInput(in[k[0]], rest)
			dst := x.stateOutput(out[k[1]])
			if src != "" && dst != "" && !used[src] && !used[dst] {
				pair(src, dst, fmt.Sprintf("the %s node %s's initial and final state", n.GetOpType(), nodeName(n)))
			}
		}
	}
	// Names that differ only by in/out/new/next: state_in_0/state_out_0, rnn_states/new_rnn_states.
	for _, in := range rest {
		key, dropIn := stateKey(in)
		if used[in] || key == "" {
			continue
		}
		for _, out := range x.outputs {
			k, dropOut := stateKey(out)
			if !used[out] && k == key && (dropIn || dropOut) && in != out && sameShape(x.tensor(in), x.tensor(out)) {
				pair(in, out, "named as a pair")
				break
			}
		}
	}
	// The observation.
	for _, pass := range []func(string) bool{
		func(n string) bool {
			return slices.Contains([]string{"obs", "observation", "observations", "input", "x", "obs_flat", "input_1"}, strings.ToLower(n))
		},
		func(n string) bool { return r.obsShaped(x.tensor(n)) },
		func(n string) bool {
			dt := x.tensor(n).dtype
			return dt == head.Float32 || dt == head.Uint8 || dt == head.Float64
		},
	} {
		for _, in := range rest {
			if b.Observation == "" && !used[in] && pass(in) {
				b.Observation = in
				used[in] = true
			}
		}
	}
	if b.Observation != "" {
		r.note("input %s takes the observations", b.Observation)
		if s := x.tensor(b.Observation).shape; len(s) > 0 {
			x.batch = s[0]
		}
	}
	// Inputs and outputs of one shape (rank ≥ 2): the state of a layer traced no other way.
	for _, in := range rest {
		t := x.tensor(in)
		if used[in] || !t.known() || len(t.shape) < 2 || t.dtype != head.Float32 || len(x.consumers[in]) == 0 {
			continue
		}
		for _, out := range x.outputs {
			if !used[out] && sameShape(t, x.tensor(out)) {
				pair(in, out, "an input and an output of the same shape")
				break
			}
		}
	}
	for _, in := range rest {
		if out, ok := passed[in]; ok {
			b.Zeros = append(b.Zeros, in)
			r.note("input %s is passed through to %s unchanged (a dummy state, as RLlib exports feed-forward models); fed zeros", in, out)
			continue
		}
		if !used[in] {
			b.Zeros = append(b.Zeros, in)
			if len(x.consumers[in]) == 0 {
				r.note("input %s is never read; fed zeros", in)
			} else {
				r.note("input %s has no role recognised; fed zeros", in)
			}
		}
	}
}

// obsShaped reports whether t's rows have the env's observation shape.
func (r *recogniser) obsShaped(t *tensor) bool {
	if !t.known() || len(r.env.ObsShape) == 0 || len(t.shape) != len(r.env.ObsShape)+1 {
		return false
	}
	for i, d := range r.env.ObsShape {
		if t.shape[i+1] != int64(d) {
			return false
		}
	}
	return true
}

// batchAxis is the axis of a state that runs over envs: torch's recurrent layers keep states as
// [layers, batch, hidden], the exporters that flatten them as [batch, hidden].
func batchAxis(shape []int64) int {
	if len(shape) == 3 && (shape[1] < 0 || shape[0] >= 0) {
		return 1
	}
	return 0
}

func sameShape(a, b *tensor) bool {
	return a.known() && b.known() && a.dtype == b.dtype && slices.Equal(a.shape, b.shape)
}

// stateKey is a name with its in/out/new/next words dropped: "state_in_0" and "state_out_0"
// both give "state_0". dropped reports whether any word was.
func stateKey(name string) (key string, dropped bool) {
	words := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	var kept []string
	for _, w := range words {
		switch w {
		case "in", "ins", "input", "inputs", "out", "outs", "output", "outputs", "new", "next", "prev", "previous", "initial", "final":
			dropped = true
		default:
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, "_"), dropped
}

// stateOps carry a recurrent state between a graph input or output and a recurrent node.
var stateOps = map[string]bool{
	"Identity": true, "Unsqueeze": true, "Squeeze": true, "Reshape": true, "Transpose": true,
	"Slice": true, "Gather": true, "Split": true, "Concat": true, "Cast": true, "Mul": true,
	"Expand": true, "Flatten": true,
}

// stateInput is the graph input among candidates that a recurrent node's initial state is
// read from.
func (x *index) stateInput(name string, candidates []string) string {
	seen := map[string]bool{}
	var walk func(string, int) string
	walk = func(name string, depth int) string {
		if seen[name] || depth > 16 {
			return ""
		}
		seen[name] = true
		if slices.Contains(candidates, name) {
			return name
		}
		n := x.producer(name)
		if n == nil || !stateOps[n.GetOpType()] {
			return ""
		}
		for _, in := range n.GetInput() {
			if in != "" && !x.isConst(in) {
				if s := walk(in, depth+1); s != "" {
					return s
				}
			}
		}
		return ""
	}
	return walk(name, 0)
}

// stateOutput is the graph output a recurrent node's final state is written to.
func (x *index) stateOutput(name string) string {
	out, _ := x.forward(name, func(n *onnxpb.NodeProto, _ string) bool { return stateOps[n.GetOpType()] })
	return out
}

// family names the exporter from module, input and output names.
func (r *recogniser) family() Family {
	x := r.x
	toks := map[string]bool{}
	addAll := func(path string) {
		for _, t := range tokens(path) {
			toks[t] = true
		}
	}
	for name, t := range x.tensors {
		if t.init {
			addAll(paramModule(name))
		}
	}
	for _, n := range x.nodes {
		addAll(nodeModule(n.GetName()))
	}
	has := func(want ...string) bool {
		for _, w := range want {
			if toks[w] {
				return true
			}
		}
		return false
	}
	named := func(names []string, want ...string) bool {
		for _, n := range names {
			low := strings.ToLower(n)
			for _, w := range want {
				if low == w || strings.HasPrefix(low, w+"_") {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has("lstm_actor", "lstm_critic") || (has("action_net") && r.b.EpisodeStarts != ""):
		return FamilySB3Recurrent
	case has("q_net", "q_net_target") && !has("action_net", "value_net", "mu", "latent_pi"):
		return FamilySB3DQN
	case has("latent_pi") || (has("actor") && has("mu")):
		return FamilySB3SAC
	case has("action_net", "mlp_extractor"):
		return FamilySB3
	case has("action_parameterization", "distribution_linear", "critic_linear", "actor_critic") ||
		named(x.inputs, "rnn_states") || named(x.outputs, "output_actions"):
		return FamilySampleFactory
	case has("_logits", "_logits_branch", "_value_branch", "_hidden_layers") ||
		named(x.inputs, "state_ins", "state_in", "seq_lens"):
		return FamilyRLlib
	case has("actor_mean", "actor_logstd", "fc_mean", "fc_logstd") || (has("actor") && has("critic")):
		return FamilyCleanRL
	case has("network") && r.qNetworkShaped():
		return FamilyCleanRLDQN
	}
	return FamilyConvention
}

// qNetworkShaped reports whether the graph is shaped as CleanRL's DQN QNetwork exported alone
// (dqn.py, dqn_atari.py: one nn.Sequential named network): actions from a Discrete space, one
// input and one output of exactly one value per action, every parameter under network. A
// policy whose module is also named network and outputs logits looks the same: --head
// categorical binds it so.
func (r *recogniser) qNetworkShaped() bool {
	x := r.x
	if r.continuous() || len(x.inputs) != 1 || len(x.outputs) != 1 || x.rowSize(x.tensor(x.outputs[0])) != int64(r.env.N) {
		return false
	}
	for name, t := range x.tensors {
		param := strings.HasSuffix(name, ".weight") || strings.HasSuffix(name, ".bias")
		if t.init && param && !strings.HasPrefix(name, "network.") {
			return false
		}
	}
	return true
}

// width is the values a row of name holds: from its shape, or from the layer writing it.
func (r *recogniser) width(name string) int64 {
	if n := r.x.rowSize(r.x.tensor(name)); n >= 0 {
		return n
	}
	if l, ok := r.x.linearOf(name); ok {
		return l.width
	}
	return -1
}

// fits reports whether name's rows can hold want values (true when unknown).
func (r *recogniser) fits(name string, want int) bool {
	w := r.width(name)
	return w < 0 || w == int64(want)
}

func (r *recogniser) bound(name string) bool {
	b := &r.b
	return name != "" && (name == b.Params || name == b.LogStd || name == b.Value || name == b.Actions)
}

// layout binds the roles from the graph's structure and module names.
func (r *recogniser) layout() {
	if r.continuous() {
		r.squashed()
		r.expLogStd()
		r.scopeValue()
		r.meanFromActions()
		r.scopeParams()
		r.scopeLogStd()
	} else {
		r.argmax()
		r.scopeValue()
		r.scopeParams()
	}
	r.valueFromOutputs()
	// Bind graph outputs that carry the same values as the inner tensors found: no exposing.
	b := &r.b
	swap := func(name string) string {
		out := r.x.outputOf(name)
		if out != name {
			r.note("%s is bound as the graph output %s, which holds its values", name, out)
		}
		return out
	}
	if b.Params != "" {
		p := swap(b.Params)
		if b.Split {
			b.LogStd = p
		}
		b.Params = p
	}
	if b.Value != "" {
		b.Value = swap(b.Value)
	}
	if b.LogStd != "" && !b.Split {
		b.LogStd = swap(b.LogStd)
	}
}

// argmax finds the logits behind an ArgMax (or a Multinomial draw) and the actions it gives.
func (r *recogniser) argmax() {
	x, b := r.x, &r.b
	step := func(n *onnxpb.NodeProto) (string, bool) {
		in := n.GetInput()
		switch op := n.GetOpType(); {
		case shapeOps[op] || op == "Softmax" || op == "LogSoftmax" || op == "Exp" || op == "Log":
			return in[0], true
		case (op == "Sub" || op == "Div") && len(in) == 2:
			if p := x.producer(in[1]); p != nil && strings.HasPrefix(p.GetOpType(), "Reduce") {
				return in[0], true
			}
		}
		return x.affine(n)
	}
	for _, n := range x.nodes {
		op := n.GetOpType()
		if (op != "ArgMax" && op != "Multinomial") || len(n.GetInput()) == 0 || len(n.GetOutput()) == 0 {
			continue
		}
		src := x.back(n.GetInput()[0], step)
		if !r.fits(src, r.env.N) || x.isConst(src) {
			continue
		}
		if b.Params == "" {
			b.Params = src
			r.note("logits %s: what the %s %s reads", src, op, nodeName(n))
		}
		if op == "ArgMax" && b.Actions == "" {
			if out, _ := x.forward(n.GetOutput()[0], func(n *onnxpb.NodeProto, from string) bool {
				return shapeOps[n.GetOpType()] && n.GetInput()[0] == from
			}); out != "" {
				b.Actions = out
				r.note("actions %s: the argmax of the logits", out)
			}
		}
		if op == "Multinomial" {
			if out, _ := x.forward(n.GetOutput()[0], func(n *onnxpb.NodeProto, from string) bool {
				return shapeOps[n.GetOpType()] && n.GetInput()[0] == from
			}); out != "" {
				r.drawn = out
			}
			r.note("the graph draws its actions (%s); they are not bound, the logits are sampled instead", nodeName(n))
		}
		if b.Params != "" {
			return
		}
	}
}

// squashed finds a Tanh of a D-wide layer whose output reaches a graph output through
// constants' affine maps: SAC's tanh(mean), perhaps rescaled to the env's bounds.
func (r *recogniser) squashed() {
	x, b := r.x, &r.b
	d := r.env.ActionDim()
	for _, n := range x.nodes {
		if n.GetOpType() != "Tanh" || len(n.GetInput()) == 0 || len(n.GetOutput()) == 0 {
			continue
		}
		src := x.back(n.GetInput()[0], throughShape)
		l, ok := x.linearOf(src)
		if !ok || l.width != int64(d) || hasToken(l.tokens, logStdScopes...) {
			continue
		}
		out, path := x.forward(n.GetOutput()[0], func(n *onnxpb.NodeProto, from string) bool {
			if data, ok := x.affine(n); ok {
				return data == from
			}
			return (shapeOps[n.GetOpType()] || n.GetOpType() == "Clip") && n.GetInput()[0] == from
		})
		if out == "" {
			continue
		}
		b.Head, b.Params, b.Actions = head.TanhGaussianKind, src, out
		r.note("tanh-gaussian: actions %s are tanh of the mean %s (%s in %s)", out, src, l.op, l.path)
		r.scaling(path)
		return
	}
}

// scaling decides from the nodes between the Tanh and the actions output whether the graph
// maps [−1, 1] onto the env's bounds itself, and checks the map against the bounds.
func (r *recogniser) scaling(path []*onnxpb.NodeProto) {
	x, b := r.x, &r.b
	d := r.env.ActionDim()
	scale, bias := make([]float64, d), make([]float64, d)
	for j := range scale {
		scale[j] = 1
	}
	known, any := true, false
	for _, n := range path {
		data, ok := x.affine(n)
		if !ok {
			continue
		}
		any = true
		in := n.GetInput()
		cname := in[0]
		if cname == data {
			cname = in[1]
		}
		c, ok := x.constant(cname, 1<<16)
		if !ok || (len(c) != 1 && len(c) != d) {
			known = false
			continue
		}
		at := func(j int) float64 {
			if len(c) == 1 {
				return c[0]
			}
			return c[j]
		}
		for j := range d {
			k := at(j)
			switch op := n.GetOpType(); {
			case op == "Mul":
				scale[j], bias[j] = scale[j]*k, bias[j]*k
			case op == "Add":
				bias[j] += k
			case op == "Sub" && in[0] == data:
				bias[j] -= k
			case op == "Sub":
				scale[j], bias[j] = -scale[j], k-bias[j]
			case op == "Div" && in[0] == data:
				scale[j], bias[j] = scale[j]/k, bias[j]/k
			default: // constant / x is no affine map
				known = false
			}
		}
	}
	if !any {
		b.ActionsScaled = false
		r.note("the graph's actions are tanh's [-1, 1]: mapped onto the env's bounds")
		return
	}
	b.ActionsScaled = true
	if !known {
		r.note("the graph rescales tanh's output by constants it computes; its actions are taken as the env's (--action-scale env to map [-1, 1] instead)")
		return
	}
	var wantS, wantB []float64
	match, identity := true, true
	for j := range d {
		lo, hi := float64(r.env.Low[j]), float64(r.env.High[j])
		ws, wb := (hi-lo)/2, (hi+lo)/2
		wantS, wantB = append(wantS, ws), append(wantB, wb)
		match = match && near(scale[j], ws) && near(bias[j], wb)
		identity = identity && near(scale[j], 1) && near(bias[j], 0)
	}
	switch {
	case match:
		r.note("the graph maps tanh's [-1, 1] onto the env's bounds itself (scale %v, bias %v)", fmtFloats(scale), fmtFloats(bias))
	case identity:
		b.ActionsScaled = false
		r.note("the graph's actions are tanh's [-1, 1]: mapped onto the env's bounds")
	default:
		r.note("warning: the graph maps tanh's [-1, 1] by scale %v, bias %v; the env's bounds need %v, %v; its actions are used as they are (--action-scale env maps the samples onto the bounds)",
			fmtFloats(scale), fmtFloats(bias), fmtFloats(wantS), fmtFloats(wantB))
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-5*max(1, math.Abs(b)) }

func fmtFloats(v []float64) string {
	parts := make([]string, len(v))
	for i, f := range v {
		parts[i] = fmt.Sprintf("%.6g", f)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// expLogStd finds the log_std as what an Exp reads: a parameter of D values (bound itself
// when only reshaped on the way), or a D-wide layer's output after its clamp or rescale.
func (r *recogniser) expLogStd() {
	x, b := r.x, &r.b
	if b.LogStd != "" {
		return
	}
	d := int64(r.env.ActionDim())
	for _, n := range x.nodes {
		if n.GetOpType() != "Exp" || len(n.GetInput()) != 1 {
			continue
		}
		t := n.GetInput()[0]
		shapeOnly := true
		src := x.back(t, func(p *onnxpb.NodeProto) (string, bool) {
			op := p.GetOpType()
			switch {
			case shapeOps[op]:
				return p.GetInput()[0], true
			case op == "Clip" || op == "Tanh":
				shapeOnly = false
				return p.GetInput()[0], true
			}
			data, ok := x.affine(p)
			if ok {
				shapeOnly = false
			}
			return data, ok
		})
		st := x.tensor(src)
		l, isLinear := x.linearOf(src)
		switch {
		case st.init && st.elements() == d:
			if shapeOnly {
				t = src
			}
			b.LogStd = t
			r.note("log_std %s: the parameter %s read by %s", t, src, nodeName(n))
		case isLinear && l.width == d && src != b.Params && !hasToken(l.tokens, valueScopes...):
			b.LogStd = t
			if b.Head == head.GaussianKind && (b.Family == FamilySB3SAC || hasToken(l.tokens, "fc_logstd")) {
				b.Head = head.TanhGaussianKind
			}
			r.note("log_std %s: what %s reads, from %s in %s", t, nodeName(n), l.op, l.path)
		default:
			continue
		}
		return
	}
}

// meanFromActions finds the mean behind a float actions output that is a D-wide layer's
// output (perhaps clipped or reshaped): SB3's deterministic continuous export.
func (r *recogniser) meanFromActions() {
	x, b := r.x, &r.b
	if b.Params != "" {
		return
	}
	d := int64(r.env.ActionDim())
	for _, out := range x.outputs {
		t := x.tensor(out)
		if r.bound(out) || t.dtype != head.Float32 || head.Conventional(x.info(t)) == head.RoleValue {
			continue
		}
		src := x.back(out, func(p *onnxpb.NodeProto) (string, bool) {
			if op := p.GetOpType(); shapeOps[op] || op == "Clip" {
				return p.GetInput()[0], true
			}
			return "", false
		})
		l, ok := x.linearOf(src)
		if !ok || r.bound(src) || hasToken(l.tokens, valueScopes...) || hasToken(l.tokens, logStdScopes...) {
			continue
		}
		switch l.width {
		case d:
			b.Params = src
			if out != src {
				b.Actions = out
				r.note("mean %s (%s in %s); actions %s are the mean", src, l.op, l.path, out)
			} else {
				r.note("mean %s: %s in %s", src, l.op, l.path)
			}
		case 2 * d:
			if b.LogStd == "" {
				b.Params, b.LogStd, b.Split = src, src, true
				r.note("mean and log_std %s: %s in %s, %d values a row (mean, then log_std)", src, l.op, l.path, 2*d)
			}
		default:
			continue
		}
		return
	}
}

// scopeLinear is the last layer (in graph order) under one of scopes, tried in order, whose
// width is one of widths and which is not bound yet.
func (r *recogniser) scopeLinear(scopes []string, widths ...int64) (linear, bool) {
	lins := r.x.linears()
	for _, s := range scopes {
		for k := len(lins) - 1; k >= 0; k-- {
			l := lins[k]
			if hasToken(l.tokens, s) && slices.Contains(widths, l.width) && !r.bound(l.out) {
				return l, true
			}
		}
	}
	return linear{}, false
}

func (r *recogniser) scopeValue() {
	if r.b.Value != "" {
		return
	}
	if l, ok := r.scopeLinear(valueScopes, 1); ok {
		r.b.Value = l.out
		r.note("value %s: %s in %s", l.out, l.op, l.path)
	}
}

func (r *recogniser) scopeParams() {
	b := &r.b
	if b.Params != "" {
		return
	}
	want := []int64{int64(r.env.ActionDim())}
	if r.continuous() && b.LogStd == "" {
		want = append(want, 2*want[0])
	}
	l, ok := r.scopeLinear(paramsScopes, want...)
	if !ok {
		return
	}
	b.Params = l.out
	what := "logits"
	if r.continuous() {
		what = "mean"
		if l.width == 2*want[0] {
			b.LogStd, b.Split, what = l.out, true, "mean and log_std"
		}
	}
	r.note("%s %s: %s in %s", what, l.out, l.op, l.path)
}

// scopeLogStd finds a log_std parameter or layer by name: a parameter of D values named
// *log_std*/*logstd*, or a D-wide layer under such a module, followed through its clamp.
func (r *recogniser) scopeLogStd() {
	x, b := r.x, &r.b
	if b.LogStd != "" {
		return
	}
	d := int64(r.env.ActionDim())
	names := make([]string, 0, len(x.tensors))
	for name, t := range x.tensors {
		if t.init && t.elements() == d {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		low := strings.ToLower(name)
		if (strings.Contains(low, "log_std") || strings.Contains(low, "logstd")) && len(x.consumers[name]) > 0 {
			b.LogStd = name
			r.note("log_std %s: a parameter of %d values named so", name, d)
			return
		}
	}
	l, ok := r.scopeLinear(logStdScopes, d)
	if !ok {
		return
	}
	t := l.out
	for moved := true; moved; {
		moved = false
		for _, c := range x.consumers[t] {
			n := x.nodes[c]
			data, isAffine := x.affine(n)
			if (n.GetOpType() == "Clip" || n.GetOpType() == "Tanh") && n.GetInput()[0] == t || isAffine && data == t {
				t, moved = n.GetOutput()[0], true
				break
			}
		}
	}
	b.LogStd = t
	r.note("log_std %s: %s in %s, after its clamp", t, l.op, l.path)
}

// valueFromOutputs takes as the value a float output of one value a row that is a width-1
// layer's output, not bound otherwise.
func (r *recogniser) valueFromOutputs() {
	x, b := r.x, &r.b
	if b.Value != "" {
		return
	}
	for _, out := range x.outputs {
		t := x.tensor(out)
		if r.bound(out) || t.dtype != head.Float32 {
			continue
		}
		src := x.back(out, throughShape)
		l, ok := x.linearOf(src)
		if ok && l.width == 1 && !r.bound(src) && !hasToken(l.tokens, paramsScopes...) && !hasToken(l.tokens, logStdScopes...) {
			b.Value = out
			r.note("value %s: one value a row from %s in %s", out, l.op, l.path)
			return
		}
	}
}

// conventions binds roles still empty from the graph outputs' names (head.Conventional), as
// head.Bind does.
func (r *recogniser) conventions() {
	x, b := r.x, &r.b
	d := int64(r.env.ActionDim())
	for _, out := range x.outputs {
		t := x.tensor(out)
		if r.bound(out) || out == r.drawn || slices.ContainsFunc(b.State, func(s State) bool { return s.Output == out }) {
			continue
		}
		info := x.info(t)
		switch head.Conventional(info) {
		case head.RoleActions:
			if b.Actions == "" {
				b.Actions = out
				r.note("actions %s: by its name or type", out)
			}
		case head.RoleLogStd:
			if b.LogStd == "" && r.continuous() {
				b.LogStd = out
				r.note("log_std %s: by its name", out)
			}
		case head.RoleValue:
			if b.Value == "" && x.rowSize(t) == 1 {
				b.Value = out
				r.note("value %s: by its name", out)
			}
		case head.RoleParams:
			if b.Params != "" || !x.batched(t) {
				continue
			}
			switch n := x.rowSize(t); {
			case n == d:
				b.Params = out
				r.note("%s %s: the first output of %d values a row", map[bool]string{true: "mean", false: "logits"}[r.continuous()], out, d)
			case r.continuous() && n == 2*d && b.LogStd == "":
				b.Params, b.LogStd, b.Split = out, out, true
				r.note("mean and log_std %s: %d values a row (mean, then log_std)", out, 2*d)
			}
		}
	}
}
