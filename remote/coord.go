package remote

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Registration is what a batcher tells the coordinator when it joins.
type Registration struct {
	BatcherID   string `json:"batcher"`          // set by Client.Register
	Session     uint64 `json:"session"`          // set by Client.Register
	Host        string `json:"host,omitempty"`   // informational
	EnvID       string `json:"env_id"`           // Gymnasium id
	ObsShape    []int  `json:"obs_shape"`        // one observation's shape
	ActionSpace string `json:"action_space"`     // as in ONNX metadata, e.g. "discrete:2"
	Envs        int    `json:"envs"`             // envs it can step
	Task        string `json:"task,omitempty"`   // set by Client: the task it holds (after a learner restart)
	Agent       string `json:"agent,omitempty"`  // free text: program and version
	Detail      string `json:"detail,omitempty"` // free text
}

// Task is a collect task the coordinator hands to one batcher at a time: which env to
// run, how many, how long each rollout is and from which policy version on. A batcher
// holds its task until it leaves, dies (stops heartbeating) or the run ends.
type Task struct {
	ID          string `json:"id"`
	EnvID       string `json:"env_id"`
	Seed        uint64 `json:"seed"`
	Envs        int    `json:"envs"`
	RolloutLen  int    `json:"rollout_len"`
	PolicyFloor int64  `json:"policy_floor"` // collect only with a policy of at least this version
	// Attempt counts earlier assignments of this task (set by the coordinator): a batcher
	// seeds its envs from (Seed, Attempt), so a reassigned task does not repeat episodes.
	Attempt int `json:"attempt"`
	// Credited (set by the coordinator, with ServeConfig.Credits) asks the batcher to collect
	// each rollout with a credit (Client.Credit).
	Credited bool `json:"credited,omitempty"`
}

// BatcherStatus is the coordinator's view of one registered batcher.
type BatcherStatus struct {
	Registration
	Task          string    // ID of the task it holds, "" if none
	LastHeartbeat time.Time // or registration
}

type (
	memberReq struct {
		Batcher string `json:"batcher"`
		Session uint64 `json:"session"`
		Task    string `json:"task,omitempty"`
	}
	registerReply struct {
		Error       string `json:"error,omitempty"`
		HeartbeatMS int64  `json:"heartbeat_ms"`
		Ended       bool   `json:"ended,omitempty"`
		// WaitMS: another session of this batcher ID is alive; register again after this
		// long (a restarted batcher waits for its killed session to fall silent).
		WaitMS int64 `json:"wait_ms,omitempty"`
	}
	beatReply struct {
		Ended   bool `json:"ended,omitempty"`
		Unknown bool `json:"unknown,omitempty"` // register again (the learner restarted, or gave up on you)
		Lost    bool `json:"lost,omitempty"`    // your task was given to another batcher
	}
	taskReply struct {
		Task    *Task `json:"task,omitempty"`
		Ended   bool  `json:"ended,omitempty"`
		Unknown bool  `json:"unknown,omitempty"`
		WaitMS  int64 `json:"wait_ms,omitempty"` // no task free: ask again after this long
		Error   string
	}
)

// coordinator is the learner's registry of batchers and tasks.
type coordinator struct {
	timeout, interval time.Duration
	admit             func(Registration) error
	log               *zap.Logger

	mu      sync.Mutex // guards the fields below
	members map[sessionKey]*member
	tasks   []*taskSlot // in AddTask order
	ended   bool
	credits *credits         // nil: ServeConfig.Credits is 0
	events  map[string]int64 // events a client can repeat at will, for often
}

type member struct {
	reg  Registration
	last time.Time
	task *taskSlot
}

type taskSlot struct {
	task     Task
	holder   *member
	assigned int // times handed out
}

func (s *Server) startCoordinator() error {
	s.coord = &coordinator{timeout: s.cfg.HeartbeatTimeout, interval: s.cfg.HeartbeatInterval, admit: s.cfg.Admit,
		log: s.log, members: make(map[sessionKey]*member)}
	if s.cfg.Credits > 0 {
		s.coord.credits = newCredits(s.cfg.Credits, s.cfg.OnPolicy)
	}
	for verb, h := range map[string]func(string, *nats.Msg){
		verbRegister:  s.coord.answer(s.coord.register),
		verbHeartbeat: s.coord.answer(s.coord.heartbeat),
		verbTask:      s.coord.answer(s.coord.next),
		verbLeave:     s.coord.answer(s.coord.leave),
		verbCredit:    s.coord.credit, // answered now or later
	} {
		sub, err := s.nc.Subscribe(s.names.coordAll(verb), func(m *nats.Msg) {
			// The batcher is the one the subject names, which its credential alone may
			// publish under (BatcherPermissions), whatever the request claims.
			// Its reply goes to its own inbox only, never to another batcher's.
			id := s.names.coordID(m.Subject, verb)
			if id == "" || m.Reply != "" && !strings.HasPrefix(m.Reply, s.names.inbox(id)+".") {
				s.log.Debug("remote: ignoring a coordinator request", zap.String("subject", m.Subject), zap.String("reply", m.Reply))
				return
			}
			h(id, m)
		})
		if err != nil {
			return fmt.Errorf("remote: coordinator: subscribing %s: %w", s.names.coordAll(verb), err)
		}
		s.subs = append(s.subs, sub)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(max(min(s.cfg.HeartbeatTimeout, s.cfg.CreditLease)/4, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case now := <-t.C:
				s.coord.sweep(now)
				s.coord.mu.Lock()
				s.coord.reclaimCredits(now, s.consumerIdle(now), s.cfg.CreditLease)
				s.coord.mu.Unlock()
			}
		}
	}()
	return nil
}

// answer makes a subscription handler of a handler that answers at once; id is the batcher
// the request's subject names.
func (c *coordinator) answer(h func(id string, data []byte) any) func(string, *nats.Msg) {
	return func(id string, m *nats.Msg) { c.respond(m, h(id, m.Data)) }
}

// decodeMember decodes a heartbeat, task or leave request of batcher id: the request's own
// batcher field is ignored (one naming another batcher acts on id's sessions, where the
// other's session is unknown).
func decodeMember(id string, data []byte) (memberReq, error) {
	var r memberReq
	err := json.Unmarshal(data, &r)
	r.Batcher = id
	return r, err
}

// Bounds on a registration: the whole message, its free-text fields (cut to maxFreeText),
// and the batchers registered at once.
const (
	maxRegistrationBytes = 16 << 10
	maxFreeText          = 256
	maxMembers           = 1024
)

func (c *coordinator) register(id string, data []byte) any {
	if len(data) > maxRegistrationBytes {
		return registerReply{Error: fmt.Sprintf("a registration of %d bytes; at most %d (shorten host, agent and detail)", len(data), maxRegistrationBytes)}
	}
	var r Registration
	if err := json.Unmarshal(data, &r); err != nil {
		return registerReply{Error: fmt.Sprintf("malformed registration: %v", err)}
	}
	if r.BatcherID != id {
		return registerReply{Error: fmt.Sprintf("batcher id %q, sent as batcher %q: a credential registers its own batcher ID only", cut(r.BatcherID), id)}
	}
	if len(r.EnvID) > maxEnvLen || len(r.ObsShape) > 8 || len(r.ActionSpace) > maxFreeText || len(r.Task) > maxFreeText {
		return registerReply{Error: fmt.Sprintf("env id of %d bytes, observation shape of %d dimensions, action space of %d bytes, task of %d bytes: too long",
			len(r.EnvID), len(r.ObsShape), len(r.ActionSpace), len(r.Task))}
	}
	r.Host, r.Agent, r.Detail = cut(r.Host), cut(r.Agent), cut(r.Detail)
	if c.admit != nil {
		if err := c.admit(r); err != nil {
			c.log.Warn("remote: refused a batcher", zap.String("batcher", r.BatcherID), zap.Error(err))
			return registerReply{Error: err.Error()}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return registerReply{Ended: true}
	}
	key := sessionKey{r.BatcherID, r.Session}
	m := c.members[key]
	if m == nil {
		// A batcher ID names one batcher: a new session under it is that batcher started
		// again, so the previous session is gone — its task and credits are free at once
		// rather than after the heartbeat timeout. Unless the previous session is alive
		// (heartbeated within c.live()): then the new one waits until it falls silent, so
		// that a client cannot take over another's ID and evict it.
		for old, om := range c.members {
			if old.batcher != r.BatcherID {
				continue
			}
			if since := time.Since(om.last); since < c.live() {
				if n, ok := c.often("live id"); ok {
					c.log.Warn("remote: a second session registers under a live batcher's ID; it waits until that one falls silent",
						zap.String("batcher", r.BatcherID), zap.Int64("times", n))
				}
				return registerReply{WaitMS: max((c.live() - since).Milliseconds(), 1)}
			}
			c.log.Warn("remote: batcher registered again (a new process); its previous session is dropped",
				zap.String("batcher", r.BatcherID))
			c.drop(old, om)
		}
		if len(c.members) >= maxMembers {
			// Those that do not heartbeat are dropped after HeartbeatTimeout: ask again.
			if n, ok := c.often("full"); ok {
				c.log.Warn("remote: a batcher waits: too many registered", zap.String("batcher", r.BatcherID),
					zap.Int("registered", len(c.members)), zap.Int64("times", n))
			}
			return registerReply{WaitMS: max(c.interval.Milliseconds(), 1)}
		}
		m = &member{}
		c.members[key] = m
		c.log.Info("remote: batcher registered", zap.String("batcher", r.BatcherID), zap.String("env", r.EnvID),
			zap.Int("envs", r.Envs), zap.String("host", r.Host))
	}
	m.reg, m.last = r, time.Now()
	// Resume the task it held before a learner restart, if free; but not for a batcher whose
	// task and credits were taken back for holding credits it did not use (reclaimCredits):
	// its heartbeat registers it again with the task it held, which would take that task back
	// from the batcher it was freed for before that one asked (TestHostileCoordinator, under
	// load). It asks for a task as any other then.
	if r.Task != "" && m.task == nil && !c.hog(r.BatcherID) {
		if t := c.slot(r.Task); t != nil && t.holder == nil {
			c.assign(t, m)
		}
	}
	return registerReply{HeartbeatMS: c.interval.Milliseconds()}
}

// often counts an event a client can repeat at will and reports whether to log this one: the
// first 10, then the 16th, 32nd, 64th… It holds c.mu.
func (c *coordinator) often(event string) (n int64, log bool) {
	if c.events == nil {
		c.events = map[string]int64{}
	}
	c.events[event]++
	n = c.events[event]
	return n, n <= 10 || n&(n-1) == 0
}

// cut shortens free text to maxFreeText bytes.
func cut(s string) string {
	if len(s) > maxFreeText {
		return s[:maxFreeText]
	}
	return s
}

func (c *coordinator) heartbeat(id string, data []byte) any {
	r, err := decodeMember(id, data)
	if err != nil {
		return beatReply{Unknown: true}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ended := c.find(r)
	if ended || m == nil {
		return beatReply{Ended: ended, Unknown: m == nil}
	}
	return beatReply{Lost: r.Task != "" && (m.task == nil || m.task.task.ID != r.Task)}
}

func (c *coordinator) next(id string, data []byte) any {
	r, err := decodeMember(id, data)
	if err != nil {
		return taskReply{Error: fmt.Sprintf("malformed task request: %v", err)}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ended := c.find(r)
	if ended || m == nil {
		return taskReply{Ended: ended, Unknown: m == nil}
	}
	if m.task == nil {
		for _, t := range c.tasks {
			if t.holder == nil {
				c.assign(t, m)
				break
			}
		}
	}
	if m.task == nil {
		return taskReply{WaitMS: max(c.interval.Milliseconds(), 1)}
	}
	t := m.task.task
	t.Attempt = m.task.assigned - 1
	t.Credited = c.credits != nil
	return taskReply{Task: &t}
}

func (c *coordinator) leave(id string, data []byte) any {
	r, err := decodeMember(id, data)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := sessionKey{r.Batcher, r.Session}
	if m := c.members[key]; m != nil {
		c.drop(key, m)
		c.log.Info("remote: batcher left", zap.String("batcher", r.Batcher))
	}
	return nil
}

// sweep drops batchers silent for longer than the heartbeat timeout, freeing their tasks.
func (c *coordinator) sweep(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, m := range c.members {
		if now.Sub(m.last) > c.timeout {
			c.log.Warn("remote: batcher stopped heartbeating; its task is free again", zap.String("batcher", key.batcher),
				zap.Duration("silent", now.Sub(m.last)))
			c.drop(key, m)
		}
	}
	c.expireCredits(now, false)
}

// live is how recently a session must have heartbeated to be alive, for a new session under
// its batcher ID to wait rather than replace it: 1.5 intervals and a second of slack, so that
// a heartbeat delayed by a loaded machine does not let another client evict a live batcher
// (with 100 ms heartbeats, 1.5 intervals alone was crossed under load), and never more than
// the heartbeat timeout, after which the session is dropped anyway.
func (c *coordinator) live() time.Duration {
	return min(c.interval*3/2+time.Second, c.timeout)
}

// find returns the batcher r names, noting that it is alive, or nil; ended reports the end
// of the run. find, assign and drop hold c.mu.
func (c *coordinator) find(r memberReq) (m *member, ended bool) {
	if c.ended {
		return nil, true
	}
	if m = c.members[sessionKey{r.Batcher, r.Session}]; m != nil {
		m.last = time.Now()
	}
	return m, false
}

// hog reports whether batcher's credits and task were taken back by reclaimCredits. It holds
// c.mu.
func (c *coordinator) hog(batcher string) bool { return c.credits != nil && c.credits.hogs[batcher] }

func (c *coordinator) assign(t *taskSlot, m *member) {
	t.holder, m.task = m, t
	t.assigned++
}

func (c *coordinator) drop(key sessionKey, m *member) {
	if m.task != nil {
		m.task.holder = nil
		m.task = nil
	}
	delete(c.members, key)
	c.dropCredits(key)
}

func (c *coordinator) slot(id string) *taskSlot {
	for _, t := range c.tasks {
		if t.task.ID == id {
			return t
		}
	}
	return nil
}

// AddTask offers a collect task to the batchers; the first batcher that asks without one
// gets it. IDs must be unique.
func (s *Server) AddTask(t Task) error {
	if t.ID == "" {
		return errors.New("remote: AddTask: the task has no ID")
	}
	c := s.coord
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slot(t.ID) != nil {
		return fmt.Errorf("remote: AddTask: a task %q exists already", t.ID)
	}
	t.Attempt = 0
	c.tasks = append(c.tasks, &taskSlot{task: t})
	return nil
}

// Batchers lists the registered batchers, by ID then session.
func (s *Server) Batchers() []BatcherStatus {
	c := s.coord
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]BatcherStatus, 0, len(c.members))
	for _, m := range c.members {
		st := BatcherStatus{Registration: m.reg, LastHeartbeat: m.last}
		if m.task != nil {
			st.Task = m.task.task.ID
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b BatcherStatus) int {
		return cmp.Or(cmp.Compare(a.BatcherID, b.BatcherID), cmp.Compare(a.Session, b.Session))
	})
	return out
}

// PublishInfo sends one learn-info line (a metrics JSON object, say) to the batchers and
// watchers subscribed with Client.Info. Lines are not stored: a subscriber sees those
// sent while it listens.
func (s *Server) PublishInfo(line []byte) error {
	if err := s.nc.Publish(s.names.info(), line); err != nil {
		return fmt.Errorf("remote: publishing learn-info: %w", err)
	}
	return nil
}

// End announces the end of the run: the run bucket's state becomes "ended" (batchers
// connecting later see it too), the coordinator answers every request with it, and the
// Clients' Done channels close, which makes their loops exit. Rollouts still in the stream
// stay there.
func (s *Server) End(ctx context.Context) error {
	s.coord.mu.Lock()
	s.coord.ended = true
	s.coord.expireCredits(time.Now(), true)
	s.coord.mu.Unlock()
	if _, err := s.kv.PutString(ctx, keyState, stateEnded); err != nil {
		return fmt.Errorf("remote: announcing the end of the run: %w", err)
	}
	return nil
}

// Run states in the run bucket.
const (
	stateRunning = "running"
	stateEnded   = "ended"
)
