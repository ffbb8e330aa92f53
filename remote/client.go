package remote

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// ClientConfig configures a batcher's side. The zero value works with a credential.
type ClientConfig struct {
	// Creds is the credential file: one of the <id>.creds the learner wrote (one per
	// batcher: the batcher's ID comes from it), or a NATS .creds file for an external
	// cluster. Without one, a learner's server refuses the connection.
	Creds string
	// CAFile is a PEM CA bundle that signed the server's TLS certificate (for a tls:// URL
	// with a private CA).
	CAFile string
	// BatcherID names this batcher in the learner's accounting: letters, digits, '-', '_'
	// (see SanitizeID). A credential the learner wrote names it: leave it empty, or give the
	// same. Otherwise (an external cluster: the ID its operator granted the credential's
	// user, see BatcherPermissions) default: host name and process id.
	BatcherID string
	// Namespace must match the learner's (default "towerrl").
	Namespace string
	// Codec compresses rollouts (default S2).
	Codec Codec
	// MaxInFlight bounds the rollout chunks (≤ 1 MiB each) published and not yet
	// confirmed by the server (default 32); PublishRollout blocks beyond it.
	MaxInFlight int
	// PublishTimeout is how long a publish waits for the server's confirmation before it
	// is sent again (default 10 s).
	PublishTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between retries (defaults 50 ms and 2 s).
	RetryMin, RetryMax time.Duration
	// Logger receives notes on retries and skipped policies (default: none).
	Logger *zap.Logger

	// key, set by Server.LocalClient, is an identity that exists only in the learner's
	// process (its --local-workers): it replaces Creds.
	key *memoryKey
}

func (c *ClientConfig) defaults() {
	if c.BatcherID == "" {
		host, _ := os.Hostname()
		c.BatcherID = SanitizeID(host + "-" + strconv.Itoa(os.Getpid()))
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 32
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.RetryMin == 0 {
		c.RetryMin = 50 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

func (c *ClientConfig) validate() error {
	if err := checkToken(c.BatcherID); err != nil {
		return fmt.Errorf("remote: ClientConfig.BatcherID %q: %w (SanitizeID makes one from any string)", c.BatcherID, err)
	}
	switch {
	case c.MaxInFlight < 1:
		return fmt.Errorf("remote: ClientConfig.MaxInFlight = %d, want ≥ 1", c.MaxInFlight)
	case c.PublishTimeout < 0 || c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return errors.New("remote: ClientConfig.PublishTimeout, RetryMin or RetryMax is out of range (want durations > 0, RetryMax ≥ RetryMin)")
	case c.Codec > CodecZstd:
		return fmt.Errorf("remote: ClientConfig.Codec = %v is unknown", c.Codec)
	}
	return nil
}

// Client is a batcher's connection to a learner: it publishes rollouts, watches policies,
// registers with the coordinator, takes tasks and hears learn-info and the run's end. Its
// methods are safe for concurrent use.
type Client struct {
	cfg     ClientConfig
	names   names
	log     *zap.Logger
	id      string
	session uint64

	nc    *nats.Conn
	js    jetstream.JetStream
	codec *codec
	errs  *connErrors

	// Publishing (publish.go).
	seq     atomic.Uint64
	slots   chan struct{}  // one per chunk in flight
	pending chan *pubEntry // chunks in publish order, and flush markers, for the acker
	pubMu   sync.Mutex     // guards pubErr and stats
	pubErr  error          // first permanent publish error
	stats   ClientStats

	bindMu sync.Mutex // guards kv and obj
	kv     jetstream.KeyValue
	obj    jetstream.ObjectStore

	coordMu sync.Mutex    // guards reg, beating, assign and credits
	reg     *Registration // nil before Register
	beating bool          // the heartbeat goroutine runs
	assign  *assignment   // the task held, or nil
	credits int64         // credits spent on published rollouts (Credit asks for number credits+1)

	// reconn tells the watchers of the run bucket to watch again after a reconnection: a
	// watch is a JetStream consumer, which a restarted learner's server does not have.
	reconn *reconnects

	done     chan struct{} // closed when the run ends
	doneOnce sync.Once
	quit     chan struct{} // closed by Close
	wg       sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

type assignment struct {
	task Task
	lost chan struct{}
}

// Dial connects a batcher to the learner's NATS at url (nats://host:port or tls://…),
// retrying until ctx ends while nothing answers; a refused credential is an error at once
// (ErrUnauthorized), and so is an untrusted TLS certificate. Once connected, NATS
// reconnects by itself, forever, and the Client's calls retry with backoff.
func Dial(ctx context.Context, url string, cfg ClientConfig) (*Client, error) {
	credOpt, credID, err := credsOption(cfg.Creds)
	if err != nil {
		return nil, err
	}
	if cfg.key != nil {
		credOpt = cfg.key.option()
	}
	if credID != "" {
		if cfg.BatcherID != "" && cfg.BatcherID != credID {
			return nil, fmt.Errorf("remote: batcher ID %q, but %s is the credential of batcher %q: leave the ID out (--id), it comes from the credential", cfg.BatcherID, cfg.Creds, credID)
		}
		cfg.BatcherID = credID
	}
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	nm, err := newNames(cfg.Namespace)
	if err != nil {
		return nil, err
	}
	var sess [8]byte
	if _, err := rand.Read(sess[:]); err != nil {
		return nil, fmt.Errorf("remote: drawing a session number: %w", err)
	}
	errs := &connErrors{}
	reconn := newReconnects()
	// Replies come to this batcher's own inbox, the only one its credential may read.
	opts := []nats.Option{nats.Name("towerrl-batcher " + cfg.BatcherID), nats.MaxReconnects(-1),
		nats.CustomInboxPrefix(nm.inbox(cfg.BatcherID)),
		nats.ReconnectWait(250 * time.Millisecond), nats.ErrorHandler(errs.handler),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			cfg.Logger.Warn("remote: disconnected from the learner's NATS; reconnecting", zap.String("url", url), zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			cfg.Logger.Info("remote: reconnected", zap.String("url", nc.ConnectedUrlRedacted()))
			reconn.fire()
		})}
	if credOpt != nil {
		opts = append(opts, credOpt)
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	nc, err := connectRetry(ctx, url, cfg.Creds, opts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("remote: JetStream: %w", err)
	}
	c := &Client{
		cfg: cfg, names: nm, log: cfg.Logger, id: cfg.BatcherID, session: binary.LittleEndian.Uint64(sess[:]),
		nc: nc, js: js, codec: newCodec(0), errs: errs, reconn: reconn,
		slots: make(chan struct{}, cfg.MaxInFlight), pending: make(chan *pubEntry, cfg.MaxInFlight+16),
		done: make(chan struct{}), quit: make(chan struct{}),
	}
	c.wg.Add(2)
	go c.acker()
	go c.watchState()
	return c, nil
}

// ID is the batcher ID.
func (c *Client) ID() string { return c.id }

// Session is the number drawn at Dial that tells this process's rollouts from those of an
// earlier process with the same ID.
func (c *Client) Session() uint64 { return c.session }

// Done is closed when the learner ends the run (Server.End).
func (c *Client) Done() <-chan struct{} { return c.done }

func (c *Client) end() { c.doneOnce.Do(func() { close(c.done) }) }

// Close leaves the coordinator (freeing the task at once), stops the Client's goroutines
// and closes the connection. Rollouts published but not yet confirmed may be lost: call
// Flush first. Idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.coordMu.Lock()
		registered := c.reg != nil
		c.coordMu.Unlock()
		var errs []error
		if registered && !c.nc.IsClosed() {
			b, _ := json.Marshal(memberReq{Batcher: c.id, Session: c.session})
			if err := c.nc.Publish(c.names.coord(c.id, verbLeave), b); err != nil {
				errs = append(errs, fmt.Errorf("remote: leaving the coordinator: %w", err))
			}
		}
		close(c.quit)
		c.wg.Wait()
		if !c.nc.IsClosed() {
			if err := c.nc.FlushTimeout(2 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				c.log.Debug("remote: flushing the connection at close", zap.Error(err))
			}
		}
		c.nc.Close()
		c.codec.close()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// buckets binds the run bucket and the policy object store.
func (c *Client) buckets(ctx context.Context) (jetstream.KeyValue, jetstream.ObjectStore, error) {
	c.bindMu.Lock()
	defer c.bindMu.Unlock()
	if c.kv == nil {
		kv, err := c.js.KeyValue(ctx, c.names.runBucket())
		if err != nil {
			return nil, nil, fmt.Errorf("remote: opening the run bucket %s: %w", c.names.runBucket(), c.explain(err))
		}
		c.kv = kv
	}
	if c.obj == nil {
		obj, err := c.js.ObjectStore(ctx, c.names.policyBucket())
		if err != nil {
			return nil, nil, fmt.Errorf("remote: opening the policy store %s: %w", c.names.policyBucket(), c.explain(err))
		}
		c.obj = obj
	}
	return c.kv, c.obj, nil
}

// explain adds to err the JetStream API permission violation the server reported, if any.
func (c *Client) explain(err error) error {
	if p := c.errs.permission("$JS.API"); p != nil {
		return fmt.Errorf("%w (%w)", err, p)
	}
	return err
}

// watchState closes Done when the run bucket's state says the run ended.
func (c *Client) watchState() {
	defer c.wg.Done()
	ctx, cancel := withStop(context.Background(), c.quit, c.done)
	defer cancel()
	bo := backoff{min: c.cfg.RetryMin, max: c.cfg.RetryMax}
	for ctx.Err() == nil {
		again := c.reconn.next()
		kv, _, err := c.buckets(ctx)
		if err != nil {
			bo.wait(ctx)
			continue
		}
		wctx, wcancel := withStop(ctx, again)
		w, err := kv.Watch(wctx, keyState)
		if err != nil {
			wcancel()
			bo.wait(ctx)
			continue
		}
		bo.reset()
	updates:
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					break updates
				}
				if e != nil && e.Operation() == jetstream.KeyValuePut && string(e.Value()) == stateEnded {
					c.end()
				}
			case <-wctx.Done():
				break updates
			}
		}
		_ = w.Stop()
		wcancel()
	}
}

// reconnects is a signal for each reconnection of a Client's connection: next returns a
// channel that the next reconnection closes.
type reconnects struct {
	mu sync.Mutex // guards ch
	ch chan struct{}
}

func newReconnects() *reconnects { return &reconnects{ch: make(chan struct{})} }

func (r *reconnects) next() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ch
}

func (r *reconnects) fire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.ch)
	r.ch = make(chan struct{})
}

// request sends a coordinator request and decodes its reply, retrying while the learner
// does not answer (not started yet, restarting) until ctx ends.
func (c *Client) request(ctx context.Context, verb string, req, reply any) error {
	return c.requestTimeout(ctx, verb, req, reply, 5*time.Second)
}

// requestTimeout is request with a bound on each try other than 5 s.
func (c *Client) requestTimeout(ctx context.Context, verb string, req, reply any, timeout time.Duration) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("remote: coordinator %s: %w", verb, err)
	}
	subj := c.names.coord(c.id, verb)
	bo := backoff{min: c.cfg.RetryMin, max: c.cfg.RetryMax}
	for {
		// A request the learner held when its server went away is never answered: a
		// reconnection (to a restarted learner) sends it again at once rather than after
		// timeout (a credit request waited 23–28 s of its 30).
		again := c.reconn.next()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		rctx, cancelAgain := withStop(rctx, again)
		m, err := c.nc.RequestWithContext(rctx, subj, b)
		cancelAgain()
		cancel()
		if err == nil {
			if err := json.Unmarshal(m.Data, reply); err != nil {
				return fmt.Errorf("remote: coordinator %s: malformed reply %q: %w", verb, m.Data, err)
			}
			return nil
		}
		if p := c.errs.permission(subj); p != nil {
			return fmt.Errorf("remote: coordinator %s: %w", verb, p)
		}
		select {
		case <-c.quit:
			return ErrClosed
		default:
		}
		if ctx.Err() != nil {
			return fmt.Errorf("remote: coordinator %s: the learner did not answer: %w (last error: %v)", verb, ctx.Err(), err)
		}
		c.log.Debug("remote: coordinator request, retrying", zap.String("verb", verb), zap.Error(err))
		bo.wait(ctx)
	}
}

// Register joins the coordinator (again, after a learner restart) and starts heartbeats,
// every interval the coordinator names, until Close or the run's end. It returns an error
// wrapping ErrRefused with the coordinator's reason when the learner does not admit the
// batcher (an env or observation shape that does not fit its policy), ErrRunEnded when the
// run is over.
func (c *Client) Register(ctx context.Context, r Registration) error {
	r.BatcherID, r.Session = c.id, c.session
	c.coordMu.Lock()
	if c.assign != nil {
		r.Task = c.assign.task.ID
	}
	c.coordMu.Unlock()
	var rep registerReply
	for {
		if err := c.request(ctx, verbRegister, r, &rep); err != nil {
			return err
		}
		if rep.WaitMS == 0 {
			break
		}
		c.log.Info("remote: another session of this batcher ID is alive (a previous process, or a client using this ID); waiting for it to fall silent",
			zap.String("batcher", c.id))
		select {
		case <-ctx.Done():
			return fmt.Errorf("remote: registering %s: %w (another session of this ID is alive)", c.id, ctx.Err())
		case <-time.After(time.Duration(rep.WaitMS) * time.Millisecond):
		}
		rep = registerReply{}
	}
	if rep.Ended {
		c.end()
		return ErrRunEnded
	}
	if rep.Error != "" {
		return fmt.Errorf("%w: %s", ErrRefused, rep.Error)
	}
	interval := max(time.Duration(rep.HeartbeatMS)*time.Millisecond, 10*time.Millisecond)
	c.coordMu.Lock()
	defer c.coordMu.Unlock()
	c.reg = &r
	if !c.beating {
		c.beating = true
		c.wg.Add(1)
		go c.heartbeat(interval)
	}
	return nil
}

func (c *Client) heartbeat(interval time.Duration) {
	defer c.wg.Done()
	ctx, cancel := withStop(context.Background(), c.quit, c.done)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.coordMu.Lock()
		req := memberReq{Batcher: c.id, Session: c.session}
		if c.assign != nil {
			req.Task = c.assign.task.ID
		}
		reg := *c.reg
		c.coordMu.Unlock()
		b, _ := json.Marshal(req)
		rctx, rcancel := context.WithTimeout(ctx, max(interval, time.Second))
		m, err := c.nc.RequestWithContext(rctx, c.names.coord(c.id, verbHeartbeat), b)
		rcancel()
		var rep beatReply
		if err == nil {
			err = json.Unmarshal(m.Data, &rep)
		}
		if err != nil {
			c.log.Debug("remote: heartbeat", zap.Error(err))
			continue
		}
		switch {
		case rep.Ended:
			c.end()
			return
		case rep.Unknown:
			c.log.Warn("remote: the learner no longer knows this batcher (it restarted, this batcher was silent past its heartbeat timeout, or another process registered under its ID): registering again",
				zap.String("batcher", c.id), zap.String("task", req.Task))
			rctx, rcancel := context.WithTimeout(ctx, max(interval, time.Second))
			if err := c.Register(rctx, reg); err != nil {
				c.log.Warn("remote: registering again", zap.Error(err))
			}
			rcancel()
		case rep.Lost:
			c.log.Warn("remote: lost task "+req.Task+": the learner gave it to another batcher; asking for another",
				zap.String("batcher", c.id))
			c.revoke(req.Task)
		}
	}
}

// revoke closes the Lost channel of the assignment of task id.
func (c *Client) revoke(id string) {
	c.coordMu.Lock()
	defer c.coordMu.Unlock()
	if c.assign != nil && c.assign.task.ID == id {
		close(c.assign.lost)
		c.assign = nil
	}
}

// Assignment is a task the coordinator gave this batcher.
type Assignment struct {
	Task
	// Lost is closed when the coordinator gave the task to another batcher (this one was
	// presumed dead): stop collecting for it and ask for a task again.
	Lost <-chan struct{}
}

// Task returns the collect task the coordinator assigns to this batcher, waiting while
// every task is taken. It returns ErrRunEnded when the run ends. Register first.
func (c *Client) Task(ctx context.Context) (Assignment, error) {
	for {
		c.coordMu.Lock()
		reg := c.reg
		c.coordMu.Unlock()
		if reg == nil {
			return Assignment{}, errors.New("remote: Task before Register: register the batcher first")
		}
		select {
		case <-c.done:
			return Assignment{}, ErrRunEnded
		default:
		}
		var rep taskReply
		if err := c.request(ctx, verbTask, memberReq{Batcher: c.id, Session: c.session}, &rep); err != nil {
			return Assignment{}, err
		}
		switch {
		case rep.Ended:
			c.end()
			return Assignment{}, ErrRunEnded
		case rep.Error != "":
			return Assignment{}, fmt.Errorf("remote: the coordinator refused a task: %s", rep.Error)
		case rep.Unknown:
			if err := c.Register(ctx, *reg); err != nil {
				return Assignment{}, err
			}
			continue
		case rep.Task != nil:
			c.coordMu.Lock()
			defer c.coordMu.Unlock()
			if c.assign == nil || c.assign.task.ID != rep.Task.ID {
				if c.assign != nil {
					close(c.assign.lost)
				}
				c.assign = &assignment{task: *rep.Task, lost: make(chan struct{})}
			}
			return Assignment{Task: c.assign.task, Lost: c.assign.lost}, nil
		}
		t := time.NewTimer(time.Duration(max(rep.WaitMS, 1)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Assignment{}, ctx.Err()
		case <-c.quit:
			t.Stop()
			return Assignment{}, ErrClosed
		case <-c.done:
			t.Stop()
			return Assignment{}, ErrRunEnded
		case <-t.C:
		}
	}
}

// Info returns a channel of the learn-info lines the learner publishes from now on. It
// holds the 64 newest lines not yet taken (older ones are dropped) and is closed when ctx
// ends, the run ends or the Client closes.
func (c *Client) Info(ctx context.Context) <-chan []byte {
	in := make(chan *nats.Msg, 256)
	sub, err := c.nc.ChanSubscribe(c.names.info(), in)
	if err != nil {
		c.log.Warn("remote: subscribing to learn-info", zap.Error(err))
		out := make(chan []byte)
		close(out)
		return out
	}
	return watch(ctx, c, 64, func(ctx context.Context, out chan []byte) {
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-in:
				offerDropOldest(out, m.Data)
			}
		}
	})
}
