package remote

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Stats counts what the learner's side received. Counts are of rollouts unless named
// otherwise.
type Stats struct {
	Delivered       int64            `json:"delivered"`        // handed to the learner by Rollouts (those Source.Next then refuses included)
	Acked           int64            `json:"acked"`            // acknowledged by the learner (Delivery.Ack)
	Duplicates      int64            `json:"duplicates"`       // dropped: the same (batcher, session, seq) was already delivered
	DuplicateChunks int64            `json:"duplicate_chunks"` // chunk messages dropped as copies (redelivered or republished)
	Corrupt         int64            `json:"corrupt"`          // chunk messages dropped because they or their rollout did not decode
	Incomplete      int64            `json:"incomplete"`       // rollouts dropped with chunks missing after ChunkTimeout
	Bytes           int64            `json:"bytes"`            // wire bytes (compressed chunks) of the delivered rollouts
	PerBatcher      map[string]int64 `json:"per_batcher"`      // delivered, by batcher ID
	// Refused counts the rollouts dropped because they do not fit ServeConfig.Spec (those
	// Source.Next refuses included), by reason (env, shape, size, value, action, version,
	// unfinished) and by the batcher ID they claim.
	Refused         int64            `json:"refused"`
	RefusedReasons  map[string]int64 `json:"refused_reasons,omitempty"`
	RefusedBatchers map[string]int64 `json:"refused_batchers,omitempty"`
}

// refused counts and logs a rollout dropped for not fitting the Spec.
func (s *Server) refused(batcherID string, key fmt.Stringer, err error) {
	reason := reasonOf(err)
	if reason == "" {
		reason = "other"
	}
	s.mu.Lock()
	s.stats.Refused++
	s.stats.RefusedReasons[reason]++
	if len(s.stats.RefusedBatchers) < maxRefusedBatchers || s.stats.RefusedBatchers[batcherID] > 0 {
		s.stats.RefusedBatchers[batcherID]++
	} else {
		batcherID = "(others)"
		s.stats.RefusedBatchers[batcherID]++
	}
	n := s.stats.RefusedBatchers[batcherID]
	s.mu.Unlock()
	// A flood is logged, not copied into the log: the first 10 of a batcher, then the 16th,
	// 32nd, 64th…
	if n <= 10 || n&(n-1) == 0 {
		s.log.Warn("remote: dropping a rollout that does not fit the run", zap.String("batcher", batcherID),
			zap.Stringer("rollout", key), zap.String("reason", reason), zap.Int64("refused_from_batcher", n), zap.Error(err))
	}
}

// maxRefusedBatchers bounds the batcher IDs Stats.RefusedBatchers names (IDs are the
// batchers' to choose); the rest are counted under "(others)".
const maxRefusedBatchers = 256

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.PerBatcher = maps.Clone(s.stats.PerBatcher)
	st.RefusedReasons = maps.Clone(s.stats.RefusedReasons)
	st.RefusedBatchers = maps.Clone(s.stats.RefusedBatchers)
	return st
}

// Delivery is a rollout handed to the learner. The learner must call Ack once the rollout
// is safe (loaded into a tower stack), and also for a rollout it discards; until then the
// rollout stays in the stream and is redelivered to the next learner if this one dies.
type Delivery struct {
	Rollout     RolloutMsg
	Bytes       int       // wire bytes of its chunks
	Chunks      int       // messages it came in
	Stored      time.Time // when JetStream stored its last chunk (the server's clock)
	Redelivered bool      // some chunk had been delivered before (an earlier learner, or AckWait passed)

	srv  *Server
	key  rolloutKey
	msgs []jetstream.Msg
	seqs []uint64 // stream sequences of msgs
}

var ackBody = []byte("+ACK")

// Ack tells JetStream the rollout is consumed and waits for the server to confirm, so that
// once Ack returns nil the rollout is never redelivered. On error the learner may call it
// again. It costs a round trip: acknowledge a stack of rollouts at once with AckAll.
func (d *Delivery) Ack(ctx context.Context) error { return d.srv.AckAll(ctx, d) }

// AckAll acknowledges deliveries together, as Delivery.Ack does one: their
// acknowledgements travel concurrently, so a whole stack costs about one round trip. The
// errors are joined; what was acknowledged stays so and AckAll may be called again for
// the rest. The acknowledgements go over the control connection as requests the server
// answers once it processed them, so they do not queue behind rollout data.
func (s *Server) AckAll(ctx context.Context, ds ...*Delivery) error {
	type ack struct {
		d     *Delivery
		i     int
		reply string
	}
	var acks []ack
	s.mu.Lock()
	for _, d := range ds {
		for i, m := range d.msgs {
			if m != nil {
				acks = append(acks, ack{d, i, m.Reply()})
			}
		}
	}
	s.mu.Unlock()
	errs := make([]error, len(acks))
	do := func(k int) {
		a := acks[k]
		if _, err := s.nc.RequestWithContext(ctx, a.reply, ackBody); err != nil {
			errs[k] = fmt.Errorf("remote: acknowledging rollout %v (chunk %d of %d): %w", a.d.key, a.i+1, len(a.d.msgs), err)
			return
		}
		s.mu.Lock()
		a.d.msgs[a.i] = nil
		s.mu.Unlock()
	}
	if len(acks) == 1 {
		do(0)
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64) // requests in flight
		for k := range acks {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				do(k)
			}()
		}
		wg.Wait()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		if s.held[d.key] == d && !slices.ContainsFunc(d.msgs, func(m jetstream.Msg) bool { return m != nil }) {
			delete(s.held, d.key)
			s.stats.Acked++
		}
	}
	return errors.Join(errs...)
}

// Rollouts starts pulling rollouts and returns the channel they arrive on, in stream order
// (per batcher, publish order unless a publish had to be retried). A rollout comes out once
// all its chunks arrived and it decoded; a copy of one already delivered (a redelivery, a
// republish) is dropped. The channel is closed when ctx ends or the Server closes. One
// Rollouts loop runs at a time.
func (s *Server) Rollouts(ctx context.Context) (<-chan *Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.quit:
		return nil, ErrClosed
	default:
	}
	if s.consuming {
		return nil, errors.New("remote: Rollouts is already running; cancel its context before calling it again")
	}
	it, err := s.cons.Messages(jetstream.PullMaxBytes(s.cfg.PullBytes))
	if err != nil {
		return nil, fmt.Errorf("remote: pulling from %s: %w", s.names.rolloutStream(), err)
	}
	s.consuming = true
	s.lastChunk.Store(time.Now().UnixNano())
	out := make(chan *Delivery)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := withStop(ctx, s.quit)
		defer cancel()
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()
		c := consumer{s: s, out: out, asm: make(map[rolloutKey]*pendingRollout)}
		c.run(ctx, it)
		it.Stop()
		c.abandon()
		close(out)
		s.mu.Lock()
		s.consuming = false
		s.mu.Unlock()
	}()
	return out, nil
}

// pendingRollout is a rollout whose chunks are arriving.
type pendingRollout struct {
	assembly[jetstream.Msg]
	first time.Time
}

// maxPendingPerBatcher bounds the unfinished rollouts of one batcher ID (a batcher publishes
// one rollout after another; a retry can interleave two).
const maxPendingPerBatcher = 4

// consumer is the state of one Rollouts loop; only its goroutine touches it.
type consumer struct {
	s   *Server
	out chan<- *Delivery
	asm map[rolloutKey]*pendingRollout
}

func (c *consumer) run(ctx context.Context, it jetstream.MessagesContext) {
	sweep := time.NewTicker(max(c.s.cfg.ChunkTimeout/4, 10*time.Millisecond))
	defer sweep.Stop()
	for ctx.Err() == nil {
		select {
		case <-sweep.C:
			c.sweep()
		default:
		}
		wait, cancel := context.WithTimeout(ctx, time.Second)
		msg, err := it.Next(jetstream.NextContext(wait))
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			continue
		case err != nil:
			c.s.log.Debug("remote: pulling rollouts", zap.Error(err))
			select { // not a busy loop on a persistent error
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		c.handle(ctx, msg)
	}
}

func (c *consumer) handle(ctx context.Context, msg jetstream.Msg) {
	s := c.s
	s.lastChunk.Store(time.Now().UnixNano())
	h, data, err := parseChunk(msg.Data())
	if err != nil {
		s.log.Warn("remote: dropping a message that is not a rollout chunk", zap.String("subject", msg.Subject()), zap.Error(err))
		c.drop(msg, err)
		return
	}
	if sender := strings.TrimPrefix(msg.Subject(), s.names.rolloutSubject("")); sender != h.batcher {
		// The subject is the sender's own (BatcherPermissions): a chunk claiming another
		// batcher's ID would count against that batcher's de-duplication and credits.
		err := refuse(refusedID, "a chunk of batcher %q published as batcher %q: a credential publishes its own rollouts only", h.batcher, sender)
		s.refused(sender, h.key(), err)
		_ = msg.TermWithReason(err.Error())
		return
	}
	if sp := s.cfg.Spec; sp != nil && h.blobLen > sp.maxBlob() {
		err := refuse(refusedSize, "chunk %d of %d claims a rollout of %d bytes; the run's rollouts take at most %d", h.index, h.count, h.blobLen, sp.maxBlob())
		s.refused(h.batcher, h.key(), err)
		_ = msg.TermWithReason(err.Error())
		return
	}
	meta, err := msg.Metadata()
	if err != nil {
		s.log.Warn("remote: dropping a chunk without JetStream metadata", zap.Error(err))
		c.drop(msg, err)
		return
	}
	key := h.key()
	s.mu.Lock()
	if d := s.held[key]; d != nil {
		// The learner holds this rollout: either this is the same stream message again (its
		// AckWait passed; the learner's Ack will remove it) or another copy of it.
		same := slices.Contains(d.seqs, meta.Sequence.Stream)
		c.countDuplicate(h)
		s.mu.Unlock()
		s.log.Debug("remote: a rollout the learner holds came again", zap.Stringer("rollout", key),
			zap.Uint64("stream_seq", meta.Sequence.Stream), zap.Bool("same_message", same))
		if !same {
			_ = msg.Ack()
		}
		return
	}
	if s.dedup.seen(key) {
		c.countDuplicate(h)
		s.mu.Unlock()
		s.log.Debug("remote: dropping a copy of a rollout delivered before", zap.Stringer("rollout", key),
			zap.Uint64("stream_seq", meta.Sequence.Stream))
		_ = msg.Ack()
		return
	}
	s.mu.Unlock()

	p := c.asm[key]
	if p == nil {
		c.makeRoom(key.batcher)
		p = &pendingRollout{first: time.Now()}
		c.asm[key] = p
	}
	old, replaced, err := p.add(h, data, msg)
	if err != nil {
		s.log.Warn("remote: dropping a rollout whose chunks disagree", zap.Stringer("rollout", key), zap.Error(err))
		c.drop(msg, err)
		c.dropPending(key, err)
		return
	}
	if replaced {
		s.mu.Lock()
		s.stats.DuplicateChunks++
		s.mu.Unlock()
		if om, err := old.Metadata(); err == nil && om.Sequence.Stream != meta.Sequence.Stream {
			_ = old.Ack() // another stored copy of the same chunk: keep one
		}
	}
	if !p.complete() {
		return
	}
	delete(c.asm, key)
	d, err := c.deliverable(key, p)
	if errors.Is(err, ErrMisfit) {
		s.refused(key.batcher, key, err)
		for _, m := range p.handles {
			_ = m.TermWithReason(err.Error())
		}
		return
	}
	if err != nil {
		s.log.Warn("remote: dropping a rollout that does not decode", zap.Stringer("rollout", key), zap.Error(err))
		for _, m := range p.handles {
			c.drop(m, err)
		}
		return
	}
	s.mu.Lock()
	s.held[key] = d
	s.dedup.mark(key)
	s.mu.Unlock()
	s.handing.Store(true)
	defer func() {
		s.handing.Store(false)
		s.lastChunk.Store(time.Now().UnixNano())
	}()
	select {
	case c.out <- d:
		s.mu.Lock()
		s.stats.Delivered++
		s.stats.Bytes += int64(d.Bytes)
		s.stats.PerBatcher[key.batcher]++
		s.mu.Unlock()
		s.coord.delivered(key, d.Rollout.PolicyVersion)
	case <-ctx.Done():
		s.release(d) // not handed over
	}
}

// release gives back a delivery the learner will not use: it is forgotten, so that its
// redelivery is delivered, and its chunks are handed back to the stream at once.
func (s *Server) release(d *Delivery) {
	s.mu.Lock()
	if s.held[d.key] == d {
		delete(s.held, d.key)
		s.dedup.unmark(d.key)
	}
	msgs := slices.Clone(d.msgs)
	s.mu.Unlock()
	for _, m := range msgs {
		if m != nil {
			_ = m.Nak()
		}
	}
}

// deliverable decodes a complete rollout and checks it against its chunks.
func (c *consumer) deliverable(key rolloutKey, p *pendingRollout) (*Delivery, error) {
	blob, err := p.blob()
	if err != nil {
		return nil, err
	}
	var check func(*RolloutMsg, []colHeader) error
	if sp := c.s.cfg.Spec; sp != nil {
		check = sp.header
	}
	m, err := c.s.codec.decodeChecked(blob, check)
	if err != nil {
		return nil, err
	}
	if got := (rolloutKey{batcher: m.BatcherID, session: m.Session, seq: m.Seq}); got != key {
		return nil, fmt.Errorf("%w: rollout %v came in chunks of %v", ErrCorrupt, got, key)
	}
	d := &Delivery{Rollout: m, Chunks: len(p.handles), srv: c.s, key: key,
		msgs: slices.Clone(p.handles), seqs: make([]uint64, len(p.handles))}
	for i, msg := range p.handles {
		d.Bytes += len(msg.Data())
		if meta, err := msg.Metadata(); err == nil {
			d.seqs[i] = meta.Sequence.Stream
			if meta.Timestamp.After(d.Stored) {
				d.Stored = meta.Timestamp
			}
			d.Redelivered = d.Redelivered || meta.NumDelivered > 1
		}
	}
	return d, nil
}

func (c *consumer) countDuplicate(h chunkHeader) {
	c.s.stats.DuplicateChunks++
	if h.index == 0 {
		c.s.stats.Duplicates++
	}
}

// drop terminates a message that can never be used, so it is not redelivered.
func (c *consumer) drop(msg jetstream.Msg, why error) {
	c.s.mu.Lock()
	c.s.stats.Corrupt++
	c.s.mu.Unlock()
	_ = msg.TermWithReason(why.Error())
}

func (c *consumer) dropPending(key rolloutKey, why error) {
	p := c.asm[key]
	delete(c.asm, key)
	if p == nil {
		return
	}
	for _, m := range p.handles {
		if m != nil {
			c.drop(m, why)
		}
	}
}

// makeRoom drops the oldest unfinished rollouts of batcher, and then of any batcher, until a
// new one of batcher fits the bounds (maxPendingPerBatcher, ServeConfig.MaxPending, and half
// of StreamMaxMsgs in chunks): chunks that never complete cannot fill the stream.
func (c *consumer) makeRoom(batcher string) {
	for {
		mine, chunks := 0, 0
		var oldest, oldestMine rolloutKey
		var tOld, tMine time.Time
		for k, p := range c.asm {
			chunks += p.got
			if tOld.IsZero() || p.first.Before(tOld) {
				oldest, tOld = k, p.first
			}
			if k.batcher == batcher {
				mine++
				if tMine.IsZero() || p.first.Before(tMine) {
					oldestMine, tMine = k, p.first
				}
			}
		}
		limit := c.s.cfg.StreamMaxMsgs / 2
		switch {
		case mine >= maxPendingPerBatcher:
			c.dropUnfinished(oldestMine, "more than 4 unfinished rollouts of one batcher")
		case len(c.asm) >= c.s.cfg.MaxPending:
			c.dropUnfinished(oldest, fmt.Sprintf("more than %d unfinished rollouts (ServeConfig.MaxPending)", c.s.cfg.MaxPending))
		case limit > 0 && int64(chunks) >= limit && len(c.asm) > 0:
			c.dropUnfinished(oldest, fmt.Sprintf("unfinished rollouts hold %d chunks, half the stream's bound", chunks))
		default:
			return
		}
	}
}

// dropUnfinished drops the chunks of an unfinished rollout to make room.
func (c *consumer) dropUnfinished(key rolloutKey, why string) {
	p := c.asm[key]
	delete(c.asm, key)
	err := refuse(refusedPending, "%s: %d of its %d chunks came in %v", why, p.got, p.count, time.Since(p.first).Round(time.Millisecond))
	c.s.refused(key.batcher, key, err)
	for _, m := range p.handles {
		if m != nil {
			_ = m.TermWithReason(err.Error())
		}
	}
}

// sweep drops rollouts that waited longer than ChunkTimeout for missing chunks.
func (c *consumer) sweep() {
	for key, p := range c.asm {
		if time.Since(p.first) < c.s.cfg.ChunkTimeout {
			continue
		}
		c.s.log.Warn("remote: dropping an incomplete rollout", zap.Stringer("rollout", key),
			zap.Int("chunks", p.got), zap.Int("of", p.count))
		delete(c.asm, key)
		for _, m := range p.handles {
			if m != nil {
				_ = m.TermWithReason("incomplete rollout")
			}
		}
		c.s.mu.Lock()
		c.s.stats.Incomplete++
		c.s.mu.Unlock()
	}
}

// abandon gives back the chunks of partly received rollouts when the loop stops, for the
// next loop or learner.
func (c *consumer) abandon() {
	for key, p := range c.asm {
		delete(c.asm, key)
		for _, m := range p.handles {
			if m != nil {
				_ = m.Nak()
			}
		}
	}
}
