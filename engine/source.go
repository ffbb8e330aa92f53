package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/learner"
)

// RolloutSource feeds a run with rollouts collected elsewhere — remote batchers, through the
// learner's NATS server (cmd/train --serve, package remote) — instead of its own batchers,
// and takes its policies. See Options.Source.
type RolloutSource interface {
	// Expect tells the source what the run trains on, once, before the first Publish. A
	// source of untrusted rollouts (remote batchers) holds every rollout against it and
	// drops those that do not fit before they reach the trainer; the trainer checks the
	// sizes and versions again and drops what does not fit its batch (counted in
	// Result.RolloutsDropped), so no rollout can stop the run.
	Expect(RolloutSpec) error
	// Next returns the next rollout (it belongs to the trainer) with its acknowledgement,
	// which the trainer calls once the rollout's rows are in the learner's batch or the
	// rollout is dropped: an acknowledged rollout is never delivered again.
	Next(ctx context.Context) (Received, error)
	// Publish makes policy version (an ONNX model) the one the collectors use.
	Publish(ctx context.Context, version int64, model []byte) error
}

// RolloutSpec is what a run trains on: rollouts of Env (its id, observation shape and
// action space) over T steps of N envs, and, for a recurrent policy, its recurrent states
// (none without).
type RolloutSpec struct {
	Env    envs.Spec
	T, N   int
	States []RolloutState
}

// RolloutState is a recurrent state a rollout carries: its name (the policy's graph input)
// and its elements per env.
type RolloutState struct {
	Name string
	Dim  int
}

// Received is a rollout a RolloutSource delivered: the rollout, its acknowledgement, and what
// its transport cost (for the metrics; zero when unknown).
type Received struct {
	Rollout *batcher.Rollout
	Ack     func(context.Context) error
	Bytes   int           // bytes on the wire
	Latency time.Duration // from its publication (stored) to its delivery to the trainer
}

// TransportMetrics describe the rollouts an iteration took from a RolloutSource (dropped ones
// included): bytes on the wire, their rate over the iteration's wall time, and the mean time
// from a rollout's publication to its delivery.
type TransportMetrics struct {
	Rollouts       int   `json:"rollouts"`
	Bytes          int64 `json:"bytes"`
	BytesPerSec    Float `json:"bytes_per_sec"`
	LatencySeconds Float `json:"latency_seconds"`
}

// sourceCollector collects from a RolloutSource (Options.Source): rollouts collected
// elsewhere, each checked against the run before it is trained on (fits), and every policy
// version published to it as an exported model.
type sourceCollector struct {
	src     RolloutSource
	spec    RolloutSpec
	stop    <-chan struct{}             // Options.Stop: ends a wait for a rollout
	ack     func(context.Context) error // the held rollout's, until release
	dropped int64                       // rollouts refused: too old for ppo, or another shape
	trained int64                       // rollouts taken into the learner's batch
	// lag measures an asynchronous algorithm's policy lag; nil for an on-policy one, which
	// trains only on rollouts of the current version.
	lag    *lagMeter
	maxLag int64     // Config.MaxPolicyLag
	end    time.Time // when the last iteration (or the start) ended: the collection rate's span

	// this iteration's transport, and when the previous one's ended
	rollouts int
	bytes    int64
	latency  time.Duration
	since    time.Time
}

// newSourceCollector tells src what the run trains on (RolloutSource.Expect) and returns the
// collector that takes its rollouts. stop is Options.Stop; sequential tells an asynchronous
// algorithm (rollouts of older versions trained within cfg.MaxPolicyLag) from an on-policy one.
func newSourceCollector(src RolloutSource, stop <-chan struct{}, cfg Config, spec envs.Spec, pm policy.Model, sequential bool) (*sourceCollector, error) {
	rs := RolloutSpec{Env: spec, T: cfg.RolloutSteps, N: cfg.Workers * cfg.Envs}
	for _, st := range pm.States() {
		rs.States = append(rs.States, RolloutState{Name: st.Name, Dim: st.Dim})
	}
	if err := src.Expect(rs); err != nil {
		return nil, err
	}
	c := &sourceCollector{src: src, spec: rs, stop: stop, maxLag: cfg.MaxPolicyLag}
	if sequential {
		c.lag = &lagMeter{}
	}
	return c, nil
}

// start publishes the first policy the remote batchers collect with; a resumed run's is the
// checkpoint's, which restore publishes.
func (c *sourceCollector) start(ctx context.Context, _ *bind.Policy, firstIteration int, version int64, model []byte) error {
	c.end = time.Now()
	if c.lag != nil {
		c.lag.reset()
	}
	if firstIteration == 0 {
		return c.src.Publish(ctx, version, model)
	}
	return nil
}

// release acknowledges the rollout whose rows are in the learner's batch.
func (c *sourceCollector) release(ctx context.Context) error {
	if c.ack == nil {
		return nil
	}
	ack := c.ack
	c.ack = nil
	return ack(ctx)
}

// publish exports the current weights and publishes them to the collectors.
func (c *sourceCollector) publish(ctx context.Context, version int64, _ []float32, export func() ([]byte, error)) error {
	model, err := export()
	if err != nil {
		return err
	}
	return c.src.Publish(ctx, version, model)
}

// keep: remote batchers' rollouts interleave. ppo trains on the current version only; impala
// and appo on those within MaxPolicyLag (or sourceLagWindow without one).
func (c *sourceCollector) keep(_, version int64) int64 {
	switch {
	case c.lag == nil:
		return version
	case c.maxLag > 0:
		return version - c.maxLag
	default:
		return version - sourceLagWindow
	}
}

func (c *sourceCollector) snapshot() ([]byte, error)            { return nil, nil }
func (c *sourceCollector) restore(func() ([]byte, error)) error { return nil }

func (c *sourceCollector) metrics(m *Metrics, b *learner.SampleBatch, rows int, version int64, collect time.Duration) {
	if c.lag != nil {
		m.Async = c.lag.measure(b, rows, version, collect, batcher.StreamStats{}, c.dropped)
		m.CollectSPS = Float(m.Async.rate)
	} else {
		// A rollout the remote batchers finished while the learner trained is taken at
		// once: the wait for it (nanoseconds) is no rate (21 billion steps/s were reported).
		// The rows over the iteration's whole span are.
		m.CollectSPS = Float(float64(rows) / time.Since(c.end).Seconds())
	}
	c.end = time.Now()
	m.Transport = c.transport()
}

func (c *sourceCollector) result(res *Result) {
	res.RolloutsTrained, res.RolloutsDropped = c.trained, c.dropped
	if c.lag != nil && c.lag.rows > 0 {
		res.Async = c.lag.summary()
	}
}

func (c *sourceCollector) close() error { return nil }

// transport reports the iteration's transport and starts counting the next one's.
func (s *sourceCollector) transport() *TransportMetrics {
	now := time.Now()
	m := &TransportMetrics{Rollouts: s.rollouts, Bytes: s.bytes}
	if wall := now.Sub(s.since).Seconds(); wall > 0 && !s.since.IsZero() {
		m.BytesPerSec = Float(float64(s.bytes) / wall)
	}
	if s.rollouts > 0 {
		m.LatencySeconds = Float(s.latency.Seconds() / float64(s.rollouts))
	}
	s.rollouts, s.bytes, s.latency, s.since = 0, 0, 0, now
	return m
}

// errStopWaiting is sourceCollector.collect's error when Options.Stop closed while it waited for a
// rollout: the iteration has done nothing yet, and the run stops with a checkpoint of the
// iterations before it (stopWaiting).
var errStopWaiting = fmt.Errorf("%w while waiting for rollouts", ErrStopped)

// collect takes the source's next rollout that fits the run: of its shape
// (Workers×Envs envs, RolloutSteps steps, the env's observation and action sizes, every
// column long enough), of versions the run has had (0 to the current one), and for a
// synchronous algorithm of the current version (ppo is on-policy), for an asynchronous one
// at most MaxPolicyLag versions behind (when set). A rollout that does not fit is
// acknowledged and counted as dropped: a remote one that slipped past its source's checks
// costs one rollout, never the run. A closed Options.Stop ends the wait (errStopWaiting).
func (s *sourceCollector) collect(ctx context.Context, version int64) (*batcher.Rollout, error) {
	for {
		got, err := s.next(ctx)
		if err != nil {
			return nil, err
		}
		r, ack := got.Rollout, got.Ack
		s.rollouts++
		s.bytes += int64(got.Bytes)
		s.latency += got.Latency
		if s.fits(r, version) == nil {
			s.ack = ack
			s.trained++
			return r, nil
		}
		if err := ack(ctx); err != nil {
			return nil, err
		}
		s.dropped++
	}
}

// next is the source's Next, ended early by Options.Stop (errStopWaiting).
func (s *sourceCollector) next(ctx context.Context) (Received, error) {
	if s.stop == nil {
		return s.src.Next(ctx)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-wctx.Done():
		}
	}()
	got, err := s.src.Next(wctx)
	if err != nil && ctx.Err() == nil && stopped(s.stop) {
		return Received{}, errStopWaiting
	}
	return got, err
}

// fits reports why rollout r cannot be trained by this run (nil when it can): its sizes
// against the run's spec and the trainer's batch, every column's length, and its versions
// against the run's, at version (see collect).
func (s *sourceCollector) fits(r *batcher.Rollout, version int64) error {
	sp := s.spec
	if r == nil {
		return errors.New("no rollout")
	}
	od := sp.Env.Observation.Dim()
	_, discrete := sp.Env.Action.(envs.Discrete)
	ad := sp.Env.Action.Dim()
	if r.T != sp.T || r.N != sp.N || r.ObsDim != od || r.ActDim != ad || r.Discrete != discrete {
		return fmt.Errorf("a rollout of %d steps × %d envs, observations of %d, actions of %d (discrete %v); the run trains on %d × %d, %d, %d (discrete %v)",
			r.T, r.N, r.ObsDim, r.ActDim, r.Discrete, sp.T, sp.N, od, ad, discrete)
	}
	rows, n := r.T*r.N, r.N
	for _, c := range []struct {
		name      string
		have, min int
	}{
		{"Obs", len(r.Obs), rows * od}, {"Actions", len(r.Actions), rows * ad}, {"Rewards", len(r.Rewards), rows},
		{"Terminated", len(r.Terminated), rows}, {"Truncated", len(r.Truncated), rows}, {"LogP", len(r.LogP), rows},
		{"Values", len(r.Values), rows}, {"Version", len(r.Version), rows}, {"FinalObs", len(r.FinalObs), rows * od},
		{"FinalValues", len(r.FinalValues), rows}, {"LastObs", len(r.LastObs), n * od}, {"LastValues", len(r.LastValues), n},
		{"EpisodeStarts", len(r.EpisodeStarts), rows},
	} {
		if c.have < c.min {
			return fmt.Errorf("column %s holds %d values, the run's rollouts %d", c.name, c.have, c.min)
		}
	}
	if len(r.StateNames) != len(r.States) {
		return fmt.Errorf("%d recurrent state names for %d states", len(r.StateNames), len(r.States))
	}
	for _, st := range sp.States {
		k := slices.Index(r.StateNames, st.Name)
		if k < 0 || len(r.States[k]) != rows*st.Dim {
			return fmt.Errorf("recurrent state %q missing or not of %d values per row", st.Name, st.Dim)
		}
	}
	lo, hi := versionRange(r.Version[:rows])
	switch {
	case lo < 0 || hi > version:
		return fmt.Errorf("policy versions %d to %d; the run has had 0 to %d", lo, hi, version)
	case s.lag == nil && lo < version:
		return fmt.Errorf("policy version %d; ppo trains on the current one, %d", lo, version)
	case s.lag != nil && s.maxLag > 0 && version-lo > s.maxLag:
		return fmt.Errorf("policy version %d, more than max_policy_lag %d behind %d", lo, s.maxLag, version)
	}
	return nil
}

// versionRange is the oldest and newest version among vs (0, 0 when empty).
func versionRange(vs []int64) (lo, hi int64) {
	if len(vs) == 0 {
		return 0, 0
	}
	lo, hi = vs[0], vs[0]
	for _, v := range vs[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// stopWaiting ends a run whose Options.Stop closed while iteration it waited for rollouts:
// as a stop after iteration it, policy.onnx and a checkpoint of the iterations done are
// written (when the run saves) and the error wraps ErrStopped with the resume command.
func (t *trainer) stopWaiting(ctx context.Context, run *runDir, ckptPath string, it, iters int, saving bool) error {
	if !saving {
		return fmt.Errorf("%w after iteration %d of %d", ErrStopped, it, iters)
	}
	if t.red.root() {
		if err := t.writePolicy(run); err != nil {
			return err
		}
	}
	if err := t.checkpoint(ctx, ckptPath, it); err != nil {
		return err
	}
	if err := t.waitWrites(); err != nil {
		return err
	}
	return fmt.Errorf("%w while waiting for rollouts, after iteration %d of %d, with a checkpoint; continue it with: train --resume %s",
		ErrStopped, it, iters, run.Path())
}
