package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Policy is a policy as the learner published it.
type Policy struct {
	Version   int64
	ONNX      []byte   // the model; verified against SHA256
	SHA256    [32]byte // of ONNX
	Published time.Time
}

// policyPointer is the run bucket's "policy" value: which object holds the newest policy.
type policyPointer struct {
	Version   int64     `json:"version"`
	SHA256    string    `json:"sha256"` // hex
	Size      int       `json:"size"`
	Object    string    `json:"object"`
	Published time.Time `json:"published"`
}

func policyObject(version int64) string { return fmt.Sprintf("policy-v%d", version) }

// PublishPolicy stores onnx as the policy of version in the object store, then moves the
// "latest" pointer to it (version and SHA-256), then deletes all but the KeepPolicies most
// recently published policies. Batchers follow the pointer whatever its version: a resumed
// learner that publishes a lower version than its previous run did is followed too.
// Calls are serialised.
func (s *Server) PublishPolicy(ctx context.Context, version int64, onnx []byte) error {
	if len(onnx) == 0 {
		return fmt.Errorf("remote: publishing policy version %d: the model is empty", version)
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	select {
	case <-s.quit:
		return ErrClosed
	default:
	}
	sum := sha256.Sum256(onnx)
	name := policyObject(version)
	if _, err := s.obj.PutBytes(ctx, name, onnx); err != nil {
		return fmt.Errorf("remote: storing policy version %d (%d bytes) in %s: %w", version, len(onnx), s.names.policyBucket(), err)
	}
	ptr, err := json.Marshal(policyPointer{Version: version, SHA256: hex.EncodeToString(sum[:]), Size: len(onnx),
		Object: name, Published: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("remote: publishing policy version %d: %w", version, err)
	}
	// No rollout stored up to now can have been collected with this version (see
	// versions): note where the stream is before the pointer moves.
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("remote: reading the rollout stream's state before publishing version %d: %w", version, err)
	}
	s.learnerHas(version)
	s.versMu.Lock()
	s.vers.published(version, info.State.LastSeq)
	s.versMu.Unlock()
	if _, err := s.kv.Put(ctx, keyPolicy, ptr); err != nil {
		return fmt.Errorf("remote: moving the latest-policy pointer to version %d: %w", version, err)
	}
	s.publishedVersion(version)
	return s.prunePolicies(ctx, name)
}

// prunePolicies deletes all but the KeepPolicies most recently stored policies; keep, just
// stored, is never deleted. The first call lists the store (policies of an earlier learner
// may be there); later ones delete what this Server stored, without listing.
func (s *Server) prunePolicies(ctx context.Context, keep string) error {
	s.stored = append(slices.DeleteFunc(s.stored, func(n string) bool { return n == keep }), keep)
	if s.listed {
		for len(s.stored) > s.cfg.KeepPolicies {
			if err := s.obj.Delete(ctx, s.stored[0]); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return fmt.Errorf("remote: pruning old policy %s: %w", s.stored[0], err)
			}
			s.stored = s.stored[1:]
		}
		return nil
	}
	kept, err := s.pruneListed(ctx, keep)
	if err != nil {
		return err
	}
	s.listed = true
	s.stored = kept
	return nil
}

// pruneListed is prunePolicies by listing the store; it returns the policies kept, oldest
// first.
func (s *Server) pruneListed(ctx context.Context, keep string) ([]string, error) {
	infos, err := s.obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return []string{keep}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("remote: listing stored policies to prune them: %w", err)
	}
	slices.SortFunc(infos, func(a, b *jetstream.ObjectInfo) int { return b.ModTime.Compare(a.ModTime) })
	// Newest first; keep counts itself.
	kept := []string{keep}
	for _, info := range infos {
		if info.Name == keep || info.Deleted {
			continue
		}
		if len(kept) < s.cfg.KeepPolicies {
			kept = append(kept, info.Name)
			continue
		}
		if err := s.obj.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil, fmt.Errorf("remote: pruning old policy %s: %w", info.Name, err)
		}
	}
	slices.Reverse(kept)
	return kept, nil
}

// WatchPolicy returns a channel that receives the newest published policy, first the
// current one (if any), then each new one. A policy is delivered only after its bytes
// match the pointer's SHA-256 and size; one that does not (or whose object was already
// pruned) is skipped with a warning and the next pointer awaited. The channel holds one
// policy: a policy the caller has not taken yet is replaced by a newer one, so a slow
// caller only ever sees the newest. It is closed when ctx ends, the run ends or the Client
// closes. Connection trouble is retried with backoff.
func (c *Client) WatchPolicy(ctx context.Context) <-chan Policy {
	return watch(ctx, c, 1, c.watchPolicy)
}

// watch runs feed in a goroutine of the Client and returns the channel (of capacity n) it
// feeds; the channel is closed when ctx ends, the run ends or the Client closes.
func watch[T any](ctx context.Context, c *Client, n int, feed func(context.Context, chan T)) <-chan T {
	out := make(chan T, n)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer close(out)
		ctx, cancel := withStop(ctx, c.quit, c.done)
		defer cancel()
		feed(ctx, out)
	}()
	return out
}

func (c *Client) watchPolicy(ctx context.Context, out chan Policy) {
	var last Policy
	bo := backoff{min: c.cfg.RetryMin, max: c.cfg.RetryMax}
	for ctx.Err() == nil {
		// A reconnection (a restarted learner's server) ends the watch, whose consumer the
		// new server does not have, and a new one starts at the current pointer.
		again := c.reconn.next()
		kv, obj, err := c.buckets(ctx)
		if err != nil {
			c.log.Debug("remote: binding the policy buckets", zap.Error(err))
			bo.wait(ctx)
			continue
		}
		wctx, wcancel := withStop(ctx, again)
		w, err := kv.Watch(wctx, keyPolicy)
		if err != nil {
			wcancel()
			c.log.Debug("remote: watching the policy pointer", zap.Error(err))
			bo.wait(ctx)
			continue
		}
		bo.reset()
		var next jetstream.KeyValueEntry // a newer pointer that arrived during a read
		for wctx.Err() == nil {
			e, ok := next, true
			if e != nil {
				e, ok = newerOf(e, w.Updates())
			} else {
				e, ok = newest(wctx, w.Updates())
			}
			next = nil
			if !ok {
				break
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			p, newer, closed, err := c.fetchWatching(ctx, kv, obj, e.Value(), w.Updates())
			next = newer
			if closed {
				break
			}
			if err != nil {
				switch {
				case ctx.Err() != nil:
				case errors.Is(err, errSuperseded): // the learner publishes faster than this watcher reads
					c.log.Debug("remote: skipping a policy", zap.Error(err))
					if next == nil {
						// Take the newest at once, whether or not its pointer has come on
						// updates yet (a learner waiting for this batcher publishes no other).
						if cur, gerr := kv.Get(ctx, keyPolicy); gerr == nil && !bytes.Equal(cur.Value(), e.Value()) {
							next = cur
						}
					}
				default:
					c.log.Warn("remote: skipping a policy", zap.Error(err))
				}
				continue
			}
			if p.Version == last.Version && p.SHA256 == last.SHA256 {
				continue
			}
			last = p
			offerDropOldest(out, p)
		}
		_ = w.Stop()
		wcancel()
	}
}

// fetchWatching is fetchPolicy, given up as superseded when the version it reads is pruned
// while it is read. The learner prunes old versions once it has published newer ones, and a
// read of a pruned version's chunks can hang until the read's timeout (5 s; measured here in
// 1 of 3 throughput runs of 1M steps, when the learner publishes every few ms, and two or
// three times a run of APPO with one batcher, issue 28 item 3). So while it reads, the
// object's info is looked up every prunedPoll (each lookup bounded by 10 prunedPoll), and the
// read is cancelled when the object is gone; a read of a version merely superseded is let
// finish (cancelling those starves a batcher whose reads are slower than the publishing).
// It returns the newest Put entry taken from updates meanwhile (nil if none), and closed when
// updates was closed (the read is then cancelled at once).
func (c *Client) fetchWatching(ctx context.Context, kv jetstream.KeyValue, obj jetstream.ObjectStore, pointer []byte,
	updates <-chan jetstream.KeyValueEntry) (p Policy, newer jetstream.KeyValueEntry, closed bool, err error) {
	var ptr policyPointer
	_ = json.Unmarshal(pointer, &ptr) // fetchPolicy reports a malformed pointer
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(prunedPoll)
		defer tick.Stop()
		for {
			select {
			case u, ok := <-updates:
				if !ok {
					closed = true
					cancel()
					return
				}
				if u != nil && u.Operation() == jetstream.KeyValuePut {
					newer = u
				}
			case <-tick.C:
				ictx, icancel := context.WithTimeout(fctx, prunedPoll*10)
				info, err := obj.GetInfo(ictx, ptr.Object)
				icancel()
				if errors.Is(err, jetstream.ErrObjectNotFound) || (err == nil && info.Deleted) {
					cancel()
					return
				}
			case <-done:
				return
			}
		}
	}()
	p, err = c.fetchPolicy(fctx, kv, obj, pointer)
	close(done)
	<-stopped
	if err != nil && ctx.Err() == nil && fctx.Err() != nil {
		err = fmt.Errorf("%w: version %d was pruned or the watch ended while it was read (%v)", errSuperseded, ptr.Version, err)
	}
	return p, newer, closed, err
}

// prunedPoll is how often fetchWatching asks whether the version it reads still exists, once
// a newer one has been published.
const prunedPoll = 50 * time.Millisecond

// newerOf returns e or the newest entry already waiting on updates; ok is false when updates
// is closed.
func newerOf(e jetstream.KeyValueEntry, updates <-chan jetstream.KeyValueEntry) (jetstream.KeyValueEntry, bool) {
	for {
		select {
		case next, more := <-updates:
			if !more {
				return e, false
			}
			if next != nil {
				e = next
			}
		default:
			return e, true
		}
	}
}

// errSuperseded is fetchPolicy's error for a policy the pointer moved on from (or that was
// pruned) before it was read: the watcher takes the newer one.
var errSuperseded = errors.New("remote: policy superseded")

// newest returns the newest entry waiting on updates (blocking for the first one); ok is
// false when updates is closed or ctx ended.
func newest(ctx context.Context, updates <-chan jetstream.KeyValueEntry) (e jetstream.KeyValueEntry, ok bool) {
	select {
	case e, ok = <-updates:
		if !ok {
			return nil, false
		}
	case <-ctx.Done():
		return nil, false
	}
	e, _ = newerOf(e, updates) // a close after e: the next call says so
	return e, true
}

// offerDropOldest puts v on out, dropping the oldest value waiting when out is full (for a
// channel of capacity 1: replacing a value the receiver has not taken). Only one goroutine
// sends on out.
func offerDropOldest[T any](out chan T, v T) {
	select {
	case out <- v:
		return
	default:
	}
	select {
	case <-out:
	default:
	}
	out <- v
}

// fetchPolicy reads the policy a pointer names and verifies it. Transient errors are
// retried with backoff until ctx ends.
// policyReadTimeout bounds one try at reading a policy's bytes from the object store.
const policyReadTimeout = 5 * time.Second

func (c *Client) fetchPolicy(ctx context.Context, kv jetstream.KeyValue, obj jetstream.ObjectStore, pointer []byte) (Policy, error) {
	var ptr policyPointer
	if err := json.Unmarshal(pointer, &ptr); err != nil {
		return Policy{}, fmt.Errorf("remote: reading the policy pointer %q: %w", pointer, err)
	}
	want, err := hex.DecodeString(ptr.SHA256)
	if err != nil || len(want) != sha256.Size {
		return Policy{}, fmt.Errorf("remote: policy version %d: pointer's sha256 %q is not 64 hex digits", ptr.Version, ptr.SHA256)
	}
	bo := backoff{min: c.cfg.RetryMin, max: c.cfg.RetryMax}
	for {
		// A version pruned while it is read can leave GetBytes waiting for chunks that are
		// gone: each try is bounded, and a version the pointer has moved on from is given up
		// (the watcher takes the newer one).
		if cur, gerr := kv.Get(ctx, keyPolicy); gerr == nil && !bytes.Equal(cur.Value(), pointer) {
			return Policy{}, fmt.Errorf("%w: version %d was superseded before it was read", errSuperseded, ptr.Version)
		}
		gctx, cancel := context.WithTimeout(ctx, policyReadTimeout)
		b, err := obj.GetBytes(gctx, ptr.Object)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
			return Policy{}, fmt.Errorf("%w: version %d (%s) was pruned before it was read; waiting for a newer one", errSuperseded, ptr.Version, ptr.Object)
		case err != nil && ctx.Err() == nil:
			c.log.Debug("remote: reading a policy, retrying", zap.Int64("version", ptr.Version), zap.Error(err))
			bo.wait(ctx)
			continue
		case err != nil:
			return Policy{}, err
		}
		sum := sha256.Sum256(b)
		if len(b) != ptr.Size || !bytes.Equal(sum[:], want) {
			return Policy{}, fmt.Errorf("remote: policy version %d: read %d bytes with sha256 %x, the pointer says %d bytes with %s",
				ptr.Version, len(b), sum, ptr.Size, ptr.SHA256)
		}
		return Policy{Version: ptr.Version, ONNX: b, SHA256: sum, Published: ptr.Published}, nil
	}
}
