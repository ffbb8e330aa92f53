package remote

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Credits (ServeConfig.Credits): flow control from the learner to the batchers. Without
// them, batchers collect as fast as they can and a learner slower than they are drops most
// rollouts as too old (or, with ppo, as not of its current version). With them, a batcher
// asks the coordinator for a credit before it collects each rollout (Client.Credit), and
// the coordinator grants at most Credits rollouts that the learner has not been handed yet:
// a rollout handed to the learner (Server.Rollouts, Source.Next) frees its batcher's credit
// for the next batcher waiting. A grant carries a policy version floor — the newest version
// published, or, with ServeConfig.OnPolicy, the version after that of the rollout whose
// credit it reuses when the learner will train that rollout — and the batcher collects with
// a policy of at least that version. Credits of a batcher that leaves or stops heartbeating
// go back to the pool; a learner restart starts a full pool (its coordinator's state is in
// memory only).
//
// A credit is numbered per batcher session (1, 2, …): a request for a number already granted
// (its reply was lost, or the batcher collected nothing with it: its task was lost) is
// answered with the same grant and takes no other credit.

type (
	creditReq struct {
		Batcher string `json:"batcher"`
		Session uint64 `json:"session"`
		N       int64  `json:"n"` // the credit's number in the session
	}
	creditReply struct {
		Floor   int64 `json:"floor"`             // collect with a policy of at least this version
		Granted bool  `json:"granted,omitempty"` // else ask again (the request waited long enough)
		Ended   bool  `json:"ended,omitempty"`
		Unknown bool  `json:"unknown,omitempty"` // register again
	}
)

// credits is the coordinator's credit pool; it holds the coordinator's mutex.
type credits struct {
	total     int
	onPolicy  bool
	free      []int64 // floors of the credits available (0: the newest version at grant time)
	waiting   []*creditWait
	sessions  map[sessionKey]*sessionCredits
	published int64 // the newest policy version published
	// slowest is the longest a credit took from its grant to its rollout's delivery: the
	// lease grows to 4 times it, so that a batcher slower than CreditLease is not taken for
	// a hog. hogs are the batcher IDs whose credits were taken back (at most maxHogs): they
	// are granted credits only when no other batcher waits.
	slowest time.Duration
	hogs    map[string]bool
}

const maxHogs = 1024

type sessionCredits struct {
	n, floor    int64       // the newest credit granted, and its floor
	outstanding int         // credits granted whose rollouts the learner was not handed yet
	granted     []time.Time // when each outstanding credit was granted, oldest first
}

type creditWait struct {
	key   sessionKey
	n     int64
	msg   *nats.Msg
	since time.Time
}

func newCredits(total int, onPolicy bool) *credits {
	c := &credits{total: total, onPolicy: onPolicy, sessions: map[sessionKey]*sessionCredits{}}
	for range total {
		c.free = append(c.free, 0)
	}
	return c
}

// creditWaitMax is how long a credit request is held before it is answered "ask again":
// well within the client's request timeout (creditTimeout).
const creditWaitMax = 2 * time.Second

// credit answers a batcher's credit request now (a grant it holds, an unknown batcher, the
// end of the run) or holds it until a credit is free.
// id is the batcher the request's subject names; the request's own batcher field is ignored.
func (c *coordinator) credit(id string, m *nats.Msg) {
	var r creditReq
	if err := json.Unmarshal(m.Data, &r); err != nil {
		c.respond(m, creditReply{Unknown: true})
		return
	}
	r.Batcher = id
	c.mu.Lock()
	defer c.mu.Unlock()
	mem, ended := c.find(memberReq{Batcher: r.Batcher, Session: r.Session})
	switch {
	case ended || mem == nil:
		c.respond(m, creditReply{Ended: ended, Unknown: mem == nil})
		return
	case c.credits == nil: // not in use: collect freely
		c.respond(m, creditReply{Granted: true, Floor: 0})
		return
	}
	cr := c.credits
	key := sessionKey{r.Batcher, r.Session}
	if sc := cr.sessions[key]; sc != nil && r.N <= sc.n {
		c.respond(m, creditReply{Granted: true, Floor: sc.floor})
		return
	}
	w := &creditWait{key: key, n: r.N, msg: m, since: time.Now()}
	for i, o := range cr.waiting {
		if o.key == key { // asked again: the newer request replaces the older one
			cr.waiting[i] = w
			w = nil
			break
		}
	}
	if w != nil {
		cr.waiting = append(cr.waiting, w)
	}
	c.grant()
}

// grant hands free credits to waiting batchers, first come first served. It holds c.mu.
func (c *coordinator) grant() {
	cr := c.credits
	for len(cr.free) > 0 && len(cr.waiting) > 0 {
		k := slices.IndexFunc(cr.waiting, func(w *creditWait) bool { return !cr.hogs[w.key.batcher] })
		k = max(k, 0) // only hogs wait: the first of them
		w := cr.waiting[k]
		cr.waiting = slices.Delete(cr.waiting, k, k+1)
		floor := max(cr.free[len(cr.free)-1], cr.published)
		cr.free = cr.free[:len(cr.free)-1]
		sc := cr.sessions[w.key]
		if sc == nil {
			sc = &sessionCredits{}
			cr.sessions[w.key] = sc
		}
		sc.n, sc.floor = w.n, floor
		sc.outstanding++
		sc.granted = append(sc.granted, time.Now())
		c.respond(w.msg, creditReply{Granted: true, Floor: floor})
	}
}

// delivered frees the credit of a rollout handed to the learner. With OnPolicy a rollout of
// the newest version (the learner trains it, then publishes the next) frees a credit for the
// next version; any other, a credit for the newest.
func (c *coordinator) delivered(key rolloutKey, version int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cr := c.credits
	if cr == nil {
		return
	}
	sc := cr.sessions[sessionKey{key.batcher, key.session}]
	if sc == nil || sc.outstanding == 0 {
		return // collected without a credit (before a learner restart, or by an older batcher)
	}
	sc.outstanding--
	if len(sc.granted) > 0 {
		cr.slowest = max(cr.slowest, time.Since(sc.granted[0]))
		sc.granted = sc.granted[1:]
	}
	floor := int64(0)
	if cr.onPolicy && version >= cr.published {
		floor = version + 1
	}
	cr.free = append(cr.free, floor)
	c.grant()
}

// dropCredits gives a departed batcher's credits back to the pool and forgets its waiting
// request. It holds c.mu.
func (c *coordinator) dropCredits(key sessionKey) {
	cr := c.credits
	if cr == nil {
		return
	}
	if sc := cr.sessions[key]; sc != nil {
		for range sc.outstanding {
			cr.free = append(cr.free, 0)
		}
		delete(cr.sessions, key)
	}
	cr.waiting = slices.DeleteFunc(cr.waiting, func(w *creditWait) bool { return w.key == key })
	c.grant()
}

// expireCredits answers requests held longer than creditWaitMax "ask again", and every held
// request at the end of the run. It holds c.mu.
func (c *coordinator) expireCredits(now time.Time, ended bool) {
	cr := c.credits
	if cr == nil {
		return
	}
	cr.waiting = slices.DeleteFunc(cr.waiting, func(w *creditWait) bool {
		if !ended && now.Sub(w.since) < creditWaitMax {
			return false
		}
		c.respond(w.msg, creditReply{Ended: ended})
		return true
	})
}

// reclaimCredits takes back the credits of a batcher that holds one without publishing
// (issue 28, item 9d: a client that registers, takes the only credit, heartbeats and never
// publishes held the learner at 0 iterations): when every credit is granted, a batcher waits
// for one, and no rollout chunk has come for the lease (lease, or 4 times the slowest credit
// seen used, if longer), the session whose oldest credit was granted longer ago than that is
// dropped, as if it had stopped heartbeating: its task and credits go to the others, and its
// batcher ID is served last from then on. It holds c.mu.
func (c *coordinator) reclaimCredits(now time.Time, idle time.Duration, lease time.Duration) {
	cr := c.credits
	if cr == nil {
		return
	}
	lease = max(lease, 4*cr.slowest)
	if len(cr.free) > 0 || len(cr.waiting) == 0 || idle < lease {
		return
	}
	var hog sessionKey
	var since time.Time
	for key, sc := range cr.sessions {
		if len(sc.granted) > 0 && (since.IsZero() || sc.granted[0].Before(since)) {
			hog, since = key, sc.granted[0]
		}
	}
	if since.IsZero() || now.Sub(since) < lease {
		return
	}
	c.log.Warn("remote: batcher holds a credit and published nothing for longer than the credit lease while others wait: its task and credits are taken back",
		zap.String("batcher", hog.batcher), zap.Duration("held", now.Sub(since)), zap.Duration("lease", lease))
	if cr.hogs == nil {
		cr.hogs = map[string]bool{}
	}
	if len(cr.hogs) < maxHogs {
		cr.hogs[hog.batcher] = true
	}
	if m := c.members[hog]; m != nil {
		c.drop(hog, m)
	} else {
		c.dropCredits(hog)
	}
}

// publishedVersion notes the newest policy version, the floor of credits granted from now.
func (s *Server) publishedVersion(v int64) {
	c := s.coord
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.credits != nil {
		c.credits.published = v
	}
}

// CreditStats is the state of the credit pool (ServeConfig.Credits).
type CreditStats struct {
	Total   int `json:"total"`
	Free    int `json:"free"`    // not granted
	Waiting int `json:"waiting"` // batchers waiting for one
}

// Credits returns the state of the credit pool (zero when ServeConfig.Credits is 0).
func (s *Server) Credits() CreditStats {
	c := s.coord
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.credits == nil {
		return CreditStats{}
	}
	return CreditStats{Total: c.credits.total, Free: len(c.credits.free), Waiting: len(c.credits.waiting)}
}

// respond sends a coordinator reply.
func (c *coordinator) respond(m *nats.Msg, reply any) {
	if m.Reply == "" || reply == nil {
		return
	}
	b, err := json.Marshal(reply)
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		c.log.Debug("remote: answering a batcher", zap.String("subject", m.Subject), zap.Error(err))
	}
}

// creditTimeout bounds one credit request; the coordinator answers within creditWaitMax
// plus its sweep interval.
const creditTimeout = 30 * time.Second

// Credit waits for the learner's permission to collect one more rollout (ServeConfig.Credits;
// RunBatcher asks before each rollout when its Task says Credited) and returns the lowest
// policy version to collect it with. A credit not used for a published rollout (collection
// stopped: the task was lost) is not spent: the next call gets it again. It returns
// ErrRunEnded when the run ends; with credits off it returns at once.
func (c *Client) Credit(ctx context.Context) (floor int64, err error) {
	c.coordMu.Lock()
	reg := c.reg
	n := c.credits + 1
	c.coordMu.Unlock()
	if reg == nil {
		return 0, errors.New("remote: Credit before Register: register the batcher first")
	}
	for {
		select {
		case <-c.done:
			return 0, ErrRunEnded
		default:
		}
		var rep creditReply
		if err := c.requestTimeout(ctx, verbCredit, creditReq{Batcher: c.id, Session: c.session, N: n}, &rep, creditTimeout); err != nil {
			return 0, err
		}
		switch {
		case rep.Ended:
			c.end()
			return 0, ErrRunEnded
		case rep.Unknown:
			if err := c.Register(ctx, *reg); err != nil {
				return 0, err
			}
		case rep.Granted:
			return rep.Floor, nil
		}
	}
}

// spendCredit records that the credit Credit returned was used for a published rollout:
// the next Credit asks for a new one.
func (c *Client) spendCredit() {
	c.coordMu.Lock()
	c.credits++
	c.coordMu.Unlock()
}
