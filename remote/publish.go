package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ClientStats counts what a Client published.
type ClientStats struct {
	Rollouts int64 // rollouts PublishRollout accepted
	RawBytes int64 // their uncompressed column bytes
	Chunks   int64 // chunk messages the server confirmed stored
	Bytes    int64 // their wire bytes
	Retries  int64 // publishes sent again after a refusal (stream full, too many requests) or a timeout
	Failed   int64 // chunk messages given up on a permanent error (see Flush)
	InFlight int   // chunk messages published and not yet confirmed
	// Confirmed counts the rollouts whose every chunk the server confirmed stored: none of
	// them can be lost any more. LastConfirmed is the sequence number of the newest of
	// them; chunks are confirmed in publish order, so every rollout published before it is
	// confirmed too, unless a chunk of it failed for good (Failed) or its publishing was
	// abandoned half-way (PublishRollout returned an error after a first chunk).
	Confirmed     int64
	LastConfirmed uint64
}

// Stats returns a copy of the counters.
func (c *Client) Stats() ClientStats {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	st := c.stats
	st.InFlight = len(c.slots)
	return st
}

// pubEntry is one chunk on its way, or (flush != nil) a marker for Flush.
type pubEntry struct {
	msg   *nats.Msg
	seq   uint64 // the rollout's
	last  bool   // the rollout's last chunk
	fut   jetstream.PubAckFuture
	err   error // of the asynchronous publish call itself
	flush chan struct{}
}

// PublishRollout publishes m as rollout number Seq (returned) of this batcher: it sets
// m's BatcherID, Session and Seq, encodes and compresses it (so the caller may reuse m's
// buffers once it returns), splits it into chunks of at most 1 MiB and publishes them
// asynchronously. It blocks while MaxInFlight chunks await the server's confirmation. A
// chunk the server refuses for lack of room (a full stream, too many pending requests) or
// that is not confirmed within PublishTimeout is sent again, with backoff, until it is
// stored (its message ID lets JetStream drop a copy stored twice): nothing is lost to
// backpressure. A permanent refusal (a message too large, no permission) is returned by
// the next PublishRollout or Flush. After the run ended it returns ErrRunEnded.
func (c *Client) PublishRollout(ctx context.Context, m RolloutMsg) (uint64, error) {
	if err := c.publishErr(); err != nil {
		return 0, err
	}
	select {
	case <-c.quit:
		return 0, ErrClosed
	case <-c.done:
		return 0, ErrRunEnded
	default:
	}
	// The first chunk's slot is taken before the rollout gets its number, so that a call
	// that gives up waiting for it leaves no gap in the numbers published.
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, fmt.Errorf("remote: publishing a rollout: %w (%d chunks in flight)", ctx.Err(), cap(c.slots))
	case <-c.quit:
		return 0, ErrClosed
	}
	seq := c.seq.Add(1)
	m.BatcherID, m.Session, m.Seq = c.id, c.session, seq
	chunks, err := c.codec.message(&m, c.cfg.Codec)
	if err != nil {
		<-c.slots
		return 0, fmt.Errorf("remote: encoding rollout %d: %w", seq, err)
	}
	subj := c.names.rolloutSubject(c.id)
	idPrefix := c.id + "." + strconv.FormatUint(c.session, 16) + "." + strconv.FormatUint(seq, 10) + "."
	for i, chunk := range chunks {
		if i > 0 {
			select {
			case c.slots <- struct{}{}:
			case <-ctx.Done():
				return 0, fmt.Errorf("remote: publishing rollout %d (chunk %d of %d): %w; its first chunks will be dropped by the learner",
					seq, i+1, len(chunks), ctx.Err())
			case <-c.quit:
				return 0, ErrClosed
			}
		}
		msg := &nats.Msg{Subject: subj, Data: chunk, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, idPrefix+strconv.Itoa(i))
		e := &pubEntry{msg: msg, seq: seq, last: i == len(chunks)-1}
		e.fut, e.err = c.js.PublishMsgAsync(msg)
		c.pending <- e // never blocks: it has room for every slot
	}
	c.pubMu.Lock()
	c.stats.Rollouts++
	c.stats.RawBytes += int64(rawBytes(&m))
	c.pubMu.Unlock()
	return seq, nil
}

func rawBytes(m *RolloutMsg) int {
	n := 0
	for i := range m.Columns {
		n += 4 * len(m.Columns[i].F32)
		n += 8 * len(m.Columns[i].I64)
		n += 8 * len(m.Columns[i].F64)
	}
	return n
}

// Flush waits until every chunk published before it is confirmed stored or given up, and
// returns the first permanent publish error, if any.
func (c *Client) Flush(ctx context.Context) error {
	e := &pubEntry{flush: make(chan struct{})}
	select {
	case c.pending <- e:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.quit:
		return ErrClosed
	}
	select {
	case <-e.flush:
		return c.publishErr()
	case <-ctx.Done():
		return ctx.Err()
	case <-c.quit:
		return ErrClosed
	}
}

func (c *Client) publishErr() error {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return c.pubErr
}

// acker resolves published chunks in publish order: it waits for each confirmation,
// sends refused or unconfirmed chunks again until they are stored, then frees their slot.
func (c *Client) acker() {
	defer c.wg.Done()
	ctx, cancel := withStop(context.Background(), c.quit)
	defer cancel()
	var failedSeq uint64 // the last rollout a chunk of which was given up
	for {
		var e *pubEntry
		select {
		case e = <-c.pending:
		case <-ctx.Done():
			return
		}
		if e.flush != nil {
			close(e.flush)
			continue
		}
		err := e.err
		var ack *jetstream.PubAck
		if err == nil {
			select {
			case ack = <-e.fut.Ok():
			case err = <-e.fut.Err():
			case <-ctx.Done():
				return
			}
		}
		bo := backoff{min: c.cfg.RetryMin, max: c.cfg.RetryMax}
		for err != nil {
			if perm := c.permanent(e.msg.Subject, err); perm != nil {
				c.log.Error("remote: a rollout chunk was refused for good", zap.String("id", e.msg.Header.Get(jetstream.MsgIDHeader)), zap.Error(perm))
				c.pubMu.Lock()
				c.stats.Failed++
				failedSeq = e.seq
				if c.pubErr == nil {
					c.pubErr = perm
				}
				c.pubMu.Unlock()
				break
			}
			c.log.Debug("remote: rollout chunk not stored, retrying", zap.String("id", e.msg.Header.Get(jetstream.MsgIDHeader)), zap.Error(err))
			c.pubMu.Lock()
			c.stats.Retries++
			c.pubMu.Unlock()
			bo.wait(ctx)
			if ctx.Err() != nil {
				return
			}
			pctx, pcancel := context.WithTimeout(ctx, c.cfg.PublishTimeout)
			ack, err = c.js.PublishMsg(pctx, e.msg)
			pcancel()
		}
		if err == nil {
			if ce := c.log.Check(zap.DebugLevel, "remote: rollout chunk stored"); ce != nil {
				ce.Write(zap.String("id", e.msg.Header.Get(jetstream.MsgIDHeader)), zap.Uint64("stream_seq", ack.Sequence),
					zap.Bool("duplicate", ack.Duplicate), zap.String("server", c.nc.ConnectedServerId()))
			}
			c.pubMu.Lock()
			c.stats.Chunks++
			c.stats.Bytes += int64(len(e.msg.Data))
			if e.last && failedSeq != e.seq {
				c.stats.Confirmed++
				c.stats.LastConfirmed = e.seq
			}
			c.pubMu.Unlock()
		}
		<-c.slots
	}
}

// permanent returns, wrapped, an error that sending again cannot cure, or nil.
func (c *Client) permanent(subject string, err error) error {
	if p := c.errs.permission(subject); p != nil {
		return fmt.Errorf("remote: publishing a rollout to %s: %w", subject, p)
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		desc := strings.ToLower(api.Description)
		if api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || strings.Contains(desc, "too large") ||
			strings.Contains(desc, "exceeds maximum") {
			return fmt.Errorf("remote: a rollout chunk of the stream on %s is too large for the server: %w", subject, err)
		}
	}
	return nil
}
