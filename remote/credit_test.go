package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// creditResult is a Credit call's outcome.
type creditResult struct {
	floor int64
	err   error
}

// askCredit calls c.Credit on a goroutine.
func askCredit(ctx context.Context, c *Client) <-chan creditResult {
	ch := make(chan creditResult, 1)
	go func() {
		f, err := c.Credit(ctx)
		ch <- creditResult{f, err}
	}()
	return ch
}

// granted waits for a Credit call's grant.
func granted(t *testing.T, ch <-chan creditResult, floor int64) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || r.floor != floor {
			t.Fatalf("credit: floor %d, %v; want floor %d", r.floor, r.err, floor)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no credit within 5 s")
	}
}

// waiting checks that a Credit call is still waiting.
func waiting(t *testing.T, ch <-chan creditResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("granted a credit beyond the pool: floor %d, %v", r.floor, r.err)
	case <-time.After(300 * time.Millisecond):
	}
}

// registered dials a batcher and registers it.
func registered(t *testing.T, s *Server, id string) *Client {
	t.Helper()
	c := dial(t, s, ClientConfig{BatcherID: id})
	if err := c.Register(timeout(t, 10*time.Second), Registration{EnvID: "CartPole-v1"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// holdingCredit serves cfg with one task "t" (CartPole-v1, 2 envs × 4 steps) and a learner's
// Source waiting for rollouts, under a context of d, and registers batcher id, which takes the
// task and then the only credit.
func holdingCredit(t *testing.T, cfg ServeConfig, d time.Duration, id string) (*Server, context.Context, *Source, *Client) {
	t.Helper()
	s := serve(t, cfg)
	ctx := timeout(t, d)
	if err := s.AddTask(Task{ID: "t", EnvID: "CartPole-v1", Envs: 2, RolloutLen: 4}); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	c := registered(t, s, id)
	if task, err := c.Task(ctx); err != nil || task.ID != "t" {
		t.Fatalf("%s's task %+v, %v", id, task, err)
	}
	granted(t, askCredit(ctx, c), 0)
	return s, ctx, src, c
}

// publishVersion publishes rollout i of c with every row of policy version v and spends
// the credit it was collected with.
func publishVersion(t *testing.T, ctx context.Context, c *Client, i uint64, v int64) {
	t.Helper()
	m := sampleRollout(4, 2, 4, i)
	m.PolicyVersion = v
	for k := range m.Column("version").I64 {
		m.Column("version").I64[k] = v
	}
	if _, err := c.PublishRollout(ctx, m); err != nil {
		t.Fatal(err)
	}
	c.spendCredit()
}

// TestCredits: with ServeConfig.Credits the coordinator grants at most that many rollouts the
// learner has not taken; a rollout handed to the learner frees its credit, as does a batcher
// that leaves or stops heartbeating; asking again for a credit not spent gets the same one;
// the end of the run ends the waits.
func TestCredits(t *testing.T) {
	s := serve(t, ServeConfig{Credits: 2})
	ctx := timeout(t, 30*time.Second)
	if err := s.AddTask(Task{ID: "t", EnvID: "CartPole-v1", Envs: 2, RolloutLen: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishPolicy(ctx, 5, []byte("policy")); err != nil {
		t.Fatal(err)
	}
	a, b, c := registered(t, s, "a"), registered(t, s, "b"), registered(t, s, "c")
	if task, err := a.Task(ctx); err != nil || !task.Credited {
		t.Fatalf("task %+v, %v: want Credited", task, err)
	}
	granted(t, askCredit(ctx, a), 5)
	granted(t, askCredit(ctx, b), 5)
	granted(t, askCredit(ctx, b), 5) // not spent: the same credit again
	cw := askCredit(ctx, c)
	waiting(t, cw)
	if st := s.Credits(); st != (CreditStats{Total: 2, Free: 0, Waiting: 1}) {
		t.Errorf("pool %+v", st)
	}

	// a's rollout reaches the learner: c gets its credit, for the newest version.
	if err := s.PublishPolicy(ctx, 6, []byte("policy6")); err != nil {
		t.Fatal(err)
	}
	publishVersion(t, ctx, a, 1, 5)
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, ctx, ch, 1, true)
	granted(t, cw, 6)

	// b leaves holding a credit: a, waiting, gets it.
	aw := askCredit(ctx, a)
	waiting(t, aw)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	granted(t, aw, 6)

	// c dies (its connection drops, no leave): after the heartbeat timeout its credit is a's.
	publishVersion(t, ctx, a, 2, 6) // not taken by the learner yet: a holds its credit
	aw = askCredit(ctx, a)
	waiting(t, aw)
	c.nc.Close()
	granted(t, aw, 6)

	// The end of the run ends a wait.
	publishVersion(t, ctx, a, 3, 6)
	aw = askCredit(ctx, a)
	waiting(t, aw)
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-aw:
		if !errors.Is(r.err, ErrRunEnded) {
			t.Errorf("credit after the end: %v, want ErrRunEnded", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the run did not end the wait for a credit")
	}
}

// TestCreditsOnPolicy: with OnPolicy (ppo) the credit a rollout of the newest version frees
// asks for the next version (the learner trains it, then publishes that one); one freed by
// an older rollout (the learner drops it), for the newest.
func TestCreditsOnPolicy(t *testing.T) {
	s := serve(t, ServeConfig{Credits: 1, OnPolicy: true})
	ctx := timeout(t, 30*time.Second)
	if err := s.PublishPolicy(ctx, 3, []byte("policy")); err != nil {
		t.Fatal(err)
	}
	a, b := registered(t, s, "a"), registered(t, s, "b")
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	granted(t, askCredit(ctx, a), 3)
	bw := askCredit(ctx, b)
	waiting(t, bw)
	publishVersion(t, ctx, a, 1, 3)
	receive(t, ctx, ch, 1, true)
	granted(t, bw, 4) // a's rollout was of the newest version, 3: the next one is 4
	if err := s.PublishPolicy(ctx, 4, []byte("policy4")); err != nil {
		t.Fatal(err)
	}

	aw := askCredit(ctx, a)
	waiting(t, aw)
	publishVersion(t, ctx, b, 2, 3) // collected with an older policy than b was asked to
	receive(t, ctx, ch, 1, true)
	granted(t, aw, 4) // b's rollout is dropped: the learner still wants 4
	if st := s.Credits(); st != (CreditStats{Total: 1}) {
		t.Errorf("pool %+v, want the one credit granted", st)
	}
}

// TestCreditsRestartedBatcher: a batcher that registers again under its ID (a new process)
// takes the place of its previous session at once: that session's task and credits are free
// without waiting for the heartbeat timeout.
func TestCreditsRestartedBatcher(t *testing.T) {
	s := serve(t, ServeConfig{Credits: 1, HeartbeatTimeout: time.Minute})
	ctx := timeout(t, 30*time.Second)
	if err := s.AddTask(Task{ID: "t", EnvID: "CartPole-v1", Envs: 2, RolloutLen: 4}); err != nil {
		t.Fatal(err)
	}
	old := registered(t, s, "a")
	if _, err := old.Task(ctx); err != nil {
		t.Fatal(err)
	}
	granted(t, askCredit(ctx, old), 0)
	old.nc.Close() // killed: no leave, and its heartbeats stop
	again := registered(t, s, "a")
	task, err := again.Task(ctx)
	if err != nil || task.ID != "t" || task.Attempt != 1 {
		t.Fatalf("the restarted batcher's task %+v, %v: want t, its second assignment", task, err)
	}
	granted(t, askCredit(ctx, again), 0)
	if b := s.Batchers(); len(b) != 1 || b[0].Session != again.Session() {
		t.Errorf("batchers %+v, want the new session only", b)
	}
}
