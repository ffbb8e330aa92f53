package remote

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/towerrl/towerrl/batcher"
)

// Source hands a trainer the rollouts that remote batchers publish as batcher rollouts, so
// that they go the way of local ones: Next returns the next rollout, unpacked (Unpack),
// and the trainer acknowledges it (Received.Ack, or AckAll for a whole stack) once it is
// in a tower stack or discarded. A rollout is never handed out twice by one Server (see the
// package documentation on de-duplication). One that does not unpack (a batcher of another
// build, a bug, a forged message), does not fit ServeConfig.Spec, or carries a policy
// version outside the window (see Next) is acknowledged, so that no learner meets it again,
// logged with its batcher ID and counted (Stats.Refused, SourceStats.Malformed). Next is
// for one goroutine; Ack and AckAll may be called from any.
type Source struct {
	srv    *Server
	ch     <-chan *Delivery
	cancel context.CancelFunc
	pub    *policyPublisher

	mu        sync.Mutex // guards malformed
	malformed int64
	onDrop    func(batcherID string, session, seq uint64) // set by OnDrop before Next
}

// OnDrop sets f to be called, on Next's goroutine, for each rollout Next drops (and
// acknowledges) for not unpacking or not fitting the run, once it is acknowledged: a ledger
// of what the learner consumed (cmd/train's test hook) sees those too. Call it before Next.
func (src *Source) OnDrop(f func(batcherID string, session, seq uint64)) { src.onDrop = f }

// dropped acknowledges a rollout Next drops and reports it to OnDrop's function.
func (src *Source) dropped(ctx context.Context, d *Delivery) error {
	if err := d.Ack(ctx); err != nil {
		return fmt.Errorf("remote: acknowledging a rollout that does not fit the run, to drop it: %w", err)
	}
	if src.onDrop != nil {
		src.onDrop(d.key.batcher, d.key.session, d.key.seq)
	}
	return nil
}

// learnerHas notes that the learner has policy version (Source.Publish hands it over, or
// PublishPolicy publishes it): rollouts of it are not of the future.
func (s *Server) learnerHas(version int64) {
	s.versMu.Lock()
	defer s.versMu.Unlock()
	if !s.vers.started || !s.vers.taking {
		// Until the learner takes its first rollout, the newest version it has is the
		// one it starts from (a resumed trainer publishes its initial weights, then the
		// checkpoint's).
		s.vers.first = max(s.vers.first, version)
		if !s.vers.started {
			s.vers.first = version
		}
		s.vers.started = true
	}
	s.vers.handed = max(s.vers.handed, version)
}

// taking notes that the learner takes rollouts: the version it started from is fixed.
func (s *Server) taking() {
	s.versMu.Lock()
	s.vers.taking = true
	s.versMu.Unlock()
}

// checkVersions holds a rollout's rows' versions against the window (versions.check); with
// no policy published or handed over yet, only negative versions are refused.
func (s *Server) checkVersions(vs []int64, firstSeq uint64) error {
	s.versMu.Lock()
	defer s.versMu.Unlock()
	if !s.vers.started {
		for i, x := range vs {
			if x < 0 {
				return refuse(refusedVersion, "row %d: policy version %d", i, x)
			}
		}
		return nil
	}
	return s.vers.check(vs, firstSeq)
}

// versions are the policy versions a Server published, for the version window (see Next):
// the first (the run's version when this learner started: the newest it had when it first
// asked for a rollout), the newest handed to Publish,
// and for each one published since the first the rollout stream's last sequence number just
// before its pointer moved (no rollout stored at or before it can have been collected with
// it). At most maxVersionsKept are remembered, the oldest forgotten first.
type versions struct {
	started   bool
	taking    bool // the learner asked for a rollout: first is fixed
	first     int64
	handed    int64
	seqAt     map[int64]uint64
	oldestKey int64 // the oldest version in seqAt
}

const maxVersionsKept = 4096

// published notes that version's pointer is about to move, the stream's last sequence being
// lastSeq. It holds Server.versMu.
func (v *versions) published(version int64, lastSeq uint64) {
	if v.seqAt == nil {
		v.seqAt = map[int64]uint64{}
		v.oldestKey = version
	}
	if _, ok := v.seqAt[version]; ok {
		return // published again: rollouts of the first publication are of it too
	}
	v.seqAt[version] = lastSeq
	for len(v.seqAt) > maxVersionsKept {
		delete(v.seqAt, v.oldestKey)
		v.oldestKey++
	}
}

// check holds the rows' versions against the window: none negative, none newer than the
// newest handed to Publish, and each newer than the first one published before the rollout
// was stored (its chunks' lowest stream sequence being firstSeq). It holds Server.versMu.
func (v *versions) check(vs []int64, firstSeq uint64) error {
	for i, x := range vs {
		if i > 0 && x == vs[i-1] {
			continue
		}
		switch {
		case x < 0:
			return refuse(refusedVersion, "row %d: policy version %d", i, x)
		case x > v.handed:
			return refuse(refusedVersion, "row %d: policy version %d, newer than the learner's %d", i, x, v.handed)
		case x <= v.first:
			continue // the run had it before this learner started, or had it first
		}
		at, ok := v.seqAt[x]
		switch {
		case !ok && x >= v.oldestKey:
			return refuse(refusedVersion, "row %d: policy version %d, which this learner had not published when the rollout came (an earlier learner's, which this run never had)", i, x)
		case ok && firstSeq <= at:
			return refuse(refusedVersion, "row %d: policy version %d, stored before this learner published it: collected with an earlier learner's version %d, which this run never had",
				i, x, x)
		}
	}
	return nil
}

// Received is a rollout a Source handed out.
type Received struct {
	// Rollout is the batcher rollout, columns as the batcher collected them (T, N, shapes,
	// Obs, Actions, EnvActions, Rewards, Terminated, Truncated, LogP, Values, Version,
	// FinalObs, FinalValues, LastObs, LastValues, EpisodeStarts, Episodes, recurrent
	// States); it belongs to the trainer.
	Rollout       *batcher.Rollout
	EnvID         string
	BatcherID     string
	Session, Seq  uint64 // with BatcherID, what the learner de-duplicates on
	PolicyVersion int64  // the oldest among the rows
	Bytes         int    // wire bytes
	// Stored is when the stream stored its last chunk (the NATS server's clock) and Latency
	// the time from then until Next returned it: how long it queued for the learner.
	Stored      time.Time
	Latency     time.Duration
	Redelivered bool // an earlier learner was handed it and did not acknowledge it

	d *Delivery
}

// Ack acknowledges the rollout (Delivery.Ack): once it returns nil the rollout is gone from
// the stream and never handed out again, to this learner or a restarted one.
func (r *Received) Ack(ctx context.Context) error { return r.d.Ack(ctx) }

// SourceStats counts what a Source handed out, beside its Server's Stats.
type SourceStats struct {
	Stats
	Malformed int64 `json:"malformed"` // rollouts dropped because they did not unpack (also in Refused, as "shape")
}

// NewSource starts the Server's Rollouts loop (one at a time per Server) for a trainer.
// Close stops it; the rollouts handed out and not yet acknowledged stay acknowledgeable.
func NewSource(ctx context.Context, s *Server) (*Source, error) {
	ctx, cancel := context.WithCancel(ctx)
	ch, err := s.Rollouts(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Source{srv: s, ch: ch, cancel: cancel, pub: newPolicyPublisher(s)}, nil
}

// Publish hands policy version (ONNX bytes, copied) to a goroutine of the Source that
// publishes it (Server.PublishPolicy), so that the trainer does not wait on the store. A
// version still waiting when a newer one comes is skipped: batchers only ever take the
// newest. It returns the error of an earlier publication, if one failed (then nothing more is
// published), or ErrClosed after Close. Flush waits for the versions handed over.
func (src *Source) Publish(ctx context.Context, version int64, model []byte) error {
	src.srv.learnerHas(version)
	return src.pub.publish(version, model)
}

// Flush waits until every version handed to Publish is published (or skipped for a newer
// one), and returns the first publication error.
func (src *Source) Flush(ctx context.Context) error { return src.pub.flush(ctx) }

// Next returns the next rollout, waiting for one until ctx ends (ctx's error). It returns
// ErrClosed once the Source or its Server is closed.
//
// The version window: every row's policy version must be one this Source was handed
// (Publish) or one before the first it was handed (the run had those before this learner
// started), and a version after the first must have been published before the rollout was
// stored. So a learner resumed from a checkpoint refuses the rollouts left in the stream that
// an earlier learner's later versions collected (versions the resumed run never had, even
// once it publishes its own versions of the same numbers), and negative or future versions.
func (src *Source) Next(ctx context.Context) (*Received, error) {
	src.srv.taking()
	for {
		var d *Delivery
		var ok bool
		select {
		case d, ok = <-src.ch:
			if !ok {
				return nil, ErrClosed
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m := &d.Rollout
		r, err := m.Unpack()
		if err != nil {
			src.srv.refused(m.BatcherID, d.key, &refusal{reason: refusedShape, msg: err.Error()})
			src.mu.Lock()
			src.malformed++
			src.mu.Unlock()
			if err := src.dropped(ctx, d); err != nil {
				return nil, err
			}
			continue
		}
		if err := src.fits(d, r); err != nil {
			src.srv.refused(m.BatcherID, d.key, err)
			if err := src.dropped(ctx, d); err != nil {
				return nil, err
			}
			continue
		}
		return &Received{Rollout: r, EnvID: m.EnvID, BatcherID: m.BatcherID, Session: m.Session, Seq: m.Seq,
			PolicyVersion: m.PolicyVersion, Bytes: d.Bytes, Stored: d.Stored, Latency: time.Since(d.Stored),
			Redelivered: d.Redelivered, d: d}, nil
	}
}

// fits holds an unpacked rollout against the Spec's values (ServeConfig.Spec) and its
// versions against the window of the versions published (versions.check).
func (src *Source) fits(d *Delivery, r *batcher.Rollout) error {
	if sp := src.srv.cfg.Spec; sp != nil {
		if err := sp.values(r); err != nil {
			return err
		}
	}
	firstSeq := uint64(math.MaxUint64)
	for _, q := range d.seqs {
		if q > 0 {
			firstSeq = min(firstSeq, q)
		}
	}
	return src.srv.checkVersions(r.Version[:r.T*r.N], firstSeq)
}

// AckAll acknowledges rollouts together, about one round trip for a whole stack (see
// Server.AckAll).
func (src *Source) AckAll(ctx context.Context, rs ...*Received) error {
	ds := make([]*Delivery, len(rs))
	for i, r := range rs {
		ds[i] = r.d
	}
	return src.srv.AckAll(ctx, ds...)
}

// Stats returns the Server's counters and the Source's.
func (src *Source) Stats() SourceStats {
	src.mu.Lock()
	defer src.mu.Unlock()
	return SourceStats{Stats: src.srv.Stats(), Malformed: src.malformed}
}

// Close stops the Rollouts loop and waits until it has stopped; rollouts it had not handed
// out go back to the stream for the next loop or learner. Idempotent.
func (src *Source) Close() error {
	src.pub.close()
	src.cancel()
	for d := range src.ch { // handed over as the loop stopped: give it back
		src.srv.mu.Lock()
		src.srv.stats.Delivered--
		src.srv.stats.Bytes -= int64(d.Bytes)
		src.srv.stats.PerBatcher[d.key.batcher]--
		src.srv.mu.Unlock()
		src.srv.release(d)
	}
	return nil
}

// policyPublisher is Source.Publish's goroutine and its mailbox of one policy.
type policyPublisher struct {
	srv  *Server
	wake chan struct{} // capacity 1: a version is waiting
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu           sync.Mutex // guards the fields below
	next         *policyJob // the newest version handed over and not taken yet
	handed, done int64      // versions handed over; handed over and published or skipped
	err          error      // the first publication error
	closed       bool
	changed      chan struct{} // closed (and replaced) when done, err or closed change
}

type policyJob struct {
	n       int64 // its place among the versions handed over
	version int64
	model   []byte
}

func newPolicyPublisher(s *Server) *policyPublisher {
	p := &policyPublisher{srv: s, wake: make(chan struct{}, 1), quit: make(chan struct{}), changed: make(chan struct{})}
	p.wg.Add(1)
	go p.run()
	return p
}

func (p *policyPublisher) publish(version int64, model []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.err != nil:
		return p.err
	case p.closed:
		return ErrClosed
	}
	p.handed++
	p.next = &policyJob{n: p.handed, version: version, model: slices.Clone(model)}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

func (p *policyPublisher) run() {
	defer p.wg.Done()
	ctx, cancel := withStop(context.Background(), p.quit)
	defer cancel()
	for {
		select {
		case <-p.quit:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			job := p.next
			p.next = nil
			p.mu.Unlock()
			if job == nil {
				break
			}
			err := p.srv.PublishPolicy(ctx, job.version, job.model)
			p.mu.Lock()
			if err != nil && p.err == nil {
				p.err = fmt.Errorf("remote: publishing policy version %d in the background: %w", job.version, err)
			}
			p.done = job.n
			p.signal()
			p.mu.Unlock()
		}
	}
}

// signal wakes the flushes waiting. It holds p.mu.
func (p *policyPublisher) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *policyPublisher) flush(ctx context.Context) error {
	for {
		p.mu.Lock()
		err, pending, closed, ch := p.err, p.done < p.handed, p.closed, p.changed
		p.mu.Unlock()
		switch {
		case err != nil:
			return err
		case !pending:
			return nil
		case closed:
			return ErrClosed
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remote: waiting for policy publications: %w", ctx.Err())
		case <-ch:
		}
	}
}

// close stops the goroutine; a version not published yet is dropped.
func (p *policyPublisher) close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.signal()
		p.mu.Unlock()
		close(p.quit)
		p.wg.Wait()
	})
}
