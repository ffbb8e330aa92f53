package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// TestMain checks that no test leaves a goroutine behind, but one of nats.go's own: a
// JetStream context whose first async publish races its connection's close gets a nil status
// channel (jetstream/publish.go, resetPendingAcksOnReconnect) and blocks on it for good. Seen
// under heavy CPU load only; it holds no towerrl state.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

// fast shortens the server's timings for tests.
func fast(cfg ServeConfig) ServeConfig {
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = 50 * time.Millisecond
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = 400 * time.Millisecond
	}
	return cfg
}

func serve(t *testing.T, cfg ServeConfig) *Server {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Serve(ctx, fast(cfg))
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Server.Close: %v", err)
		}
	})
	return s
}

// credsFor issues the credential of batcher id (Server.AddBatcher).
func credsFor(t testing.TB, s *Server, id string) string {
	t.Helper()
	path, err := s.AddBatcher(id)
	if err != nil {
		t.Fatalf("AddBatcher %s: %v", id, err)
	}
	return path
}

// rawConn connects to s with batcher id's credential, as a hostile client would with nats.go
// (replies to that batcher's inbox, the only one it may read); permission violations are
// recorded in the returned connErrors.
func rawConn(t *testing.T, s *Server, id string) (*nats.Conn, *connErrors) {
	t.Helper()
	opt, _, err := credsOption(credsFor(t, s, id))
	if err != nil {
		t.Fatal(err)
	}
	ce := &connErrors{}
	nc, err := nats.Connect(s.URL(), opt, nats.ErrorHandler(ce.handler), nats.CustomInboxPrefix(s.names.inbox(id)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, ce
}

// dial dials s as batcher cfg.BatcherID ("b" when empty), with that batcher's credential
// unless cfg.Creds is set.
func dial(t *testing.T, s *Server, cfg ClientConfig) *Client {
	t.Helper()
	if cfg.Creds == "" {
		if cfg.BatcherID == "" {
			cfg.BatcherID = "b"
		}
		cfg.Creds = credsFor(t, s, cfg.BatcherID)
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = 10*time.Millisecond, 100*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, s.URL(), cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Client.Close: %v", err)
		}
	})
	return c
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// receive takes n deliveries (acking each unless keep), failing on a timeout.
func receive(t *testing.T, ctx context.Context, ch <-chan *Delivery, n int, ack bool) []*Delivery {
	t.Helper()
	var out []*Delivery
	for len(out) < n {
		select {
		case d, ok := <-ch:
			if !ok {
				t.Fatalf("Rollouts closed after %d of %d", len(out), n)
			}
			if ack {
				if err := d.Ack(ctx); err != nil {
					t.Fatalf("Ack: %v", err)
				}
			}
			out = append(out, d)
		case <-ctx.Done():
			t.Fatalf("received %d of %d rollouts: %v", len(out), n, ctx.Err())
		}
	}
	return out
}

// quiet fails if a delivery arrives within d.
func quiet(t *testing.T, ch <-chan *Delivery, d time.Duration) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("unexpected delivery of rollout %v", got.key)
	case <-time.After(d):
	}
}

// streamMsgs is how many messages the rollout stream holds.
func streamMsgs(t *testing.T, s *Server) uint64 {
	t.Helper()
	info, err := s.stream.Info(timeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestPolicyWatch(t *testing.T) {
	s := serve(t, ServeConfig{KeepPolicies: 2})
	ctx := timeout(t, 20*time.Second)
	model := func(v int64) []byte { return bytes.Repeat([]byte(fmt.Sprintf("onnx-v%d;", v)), 1000+int(v)) }
	if err := s.PublishPolicy(ctx, 1, model(1)); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s, ClientConfig{BatcherID: "w"})
	ch := c.WatchPolicy(ctx)
	check := func(p Policy, v int64) {
		t.Helper()
		if p.Version != v || !bytes.Equal(p.ONNX, model(v)) || p.SHA256 != sha256.Sum256(model(v)) {
			t.Fatalf("got version %d (%d bytes), want %d (%d bytes)", p.Version, len(p.ONNX), v, len(model(v)))
		}
	}
	check(<-ch, 1)

	// Three versions while the watcher's reader is away: it ends with the newest and never
	// goes back.
	for v := int64(2); v <= 4; v++ {
		if err := s.PublishPolicy(ctx, v, model(v)); err != nil {
			t.Fatal(err)
		}
	}
	last := int64(1)
	for last < 4 {
		select {
		case p := <-ch:
			if p.Version <= last {
				t.Fatalf("version %d after %d", p.Version, last)
			}
			check(p, p.Version)
			last = p.Version
		case <-ctx.Done():
			t.Fatalf("newest version never arrived (last %d)", last)
		}
	}

	// A pointer whose checksum does not match its object is skipped.
	bad := fmt.Sprintf(`{"version":5,"sha256":"%064x","size":%d,"object":"policy-v4"}`, 0, len(model(4)))
	if _, err := s.kv.PutString(ctx, keyPolicy, bad); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishPolicy(ctx, 6, model(6)); err != nil {
		t.Fatal(err)
	}
	p := <-ch
	check(p, 6)

	// Pruned to the 2 newest; a late watcher gets the current one at once.
	infos, err := s.obj.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
	}
	if len(names) != 2 || !strings.Contains(strings.Join(names, ","), "policy-v6") || !strings.Contains(strings.Join(names, ","), "policy-v4") {
		t.Errorf("stored policies %v, want policy-v4 and policy-v6", names)
	}
	late := dial(t, s, ClientConfig{BatcherID: "late"})
	check(<-late.WatchPolicy(ctx), 6)
}

// rolloutFor is rollout i of batcher b: CartPole-shaped and small, but every 15th is
// ~1.9 MiB of noise that comes in two chunks.
func rolloutFor(batcher int, i uint64) RolloutMsg {
	if i%15 == 0 {
		return sampleRollout(128, 160, 8, uint64(batcher)<<32|i)
	}
	return sampleRollout(16, 8, 4, uint64(batcher)<<32|i)
}

func TestRolloutsExactlyOnceInOrder(t *testing.T) {
	s := serve(t, ServeConfig{})
	ctx := timeout(t, 40*time.Second)
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Rollouts(ctx); err == nil {
		t.Error("a second Rollouts loop was started")
	}
	const batchers, each = 3, 30
	var wg sync.WaitGroup
	clients := make([]*Client, batchers)
	for b := range batchers {
		clients[b] = dial(t, s, ClientConfig{BatcherID: fmt.Sprintf("b%d", b), MaxInFlight: 8})
	}
	for b, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= each; i++ {
				seq, err := c.PublishRollout(ctx, rolloutFor(b, i))
				if err != nil || seq != i {
					t.Errorf("batcher %d: PublishRollout = %d, %v; want %d", b, seq, err, i)
					return
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Errorf("batcher %d: Flush: %v", b, err)
			}
		}()
	}
	got := receive(t, ctx, ch, batchers*each, true)
	wg.Wait()
	next := map[string]uint64{}
	for _, d := range got {
		m := d.Rollout
		b := int(m.BatcherID[1] - '0')
		if want := next[m.BatcherID] + 1; m.Seq != want {
			t.Fatalf("%s: rollout %d after %d", m.BatcherID, m.Seq, want-1)
		}
		next[m.BatcherID] = m.Seq
		want := rolloutFor(b, m.Seq)
		want.BatcherID, want.Session, want.Seq = clients[b].ID(), clients[b].Session(), m.Seq
		if diff := diffRollout(want, m); diff != "" {
			t.Fatalf("%s rollout %d: %s", m.BatcherID, m.Seq, diff)
		}
		if m.Seq%15 == 0 && d.Chunks < 2 {
			t.Errorf("%s rollout %d came in %d chunk(s)", m.BatcherID, m.Seq, d.Chunks)
		}
	}
	quiet(t, ch, 200*time.Millisecond)
	st := s.Stats()
	if st.Delivered != batchers*each || st.Acked != batchers*each || st.Duplicates != 0 || st.Corrupt != 0 {
		t.Errorf("stats %+v", st)
	}
	for b := range batchers {
		if n := st.PerBatcher[fmt.Sprintf("b%d", b)]; n != each {
			t.Errorf("b%d delivered %d, want %d", b, n, each)
		}
		if cs := clients[b].Stats(); cs.Rollouts != each || cs.Confirmed != each || cs.Failed != 0 || cs.InFlight != 0 {
			t.Errorf("b%d client stats %+v", b, cs)
		}
	}
	if n := streamMsgs(t, s); n != 0 {
		t.Errorf("the stream still holds %d messages after every ack", n)
	}
}

// TestRedelivery holds a rollout past AckWait (JetStream redelivers it), then republishes
// a copy under other message IDs (a batcher retrying after the duplicate window): neither
// reaches the learner twice, and both leave the stream.
func TestRedelivery(t *testing.T) {
	s := serve(t, ServeConfig{AckWait: 500 * time.Millisecond})
	ctx := timeout(t, 20*time.Second)
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s, ClientConfig{BatcherID: "r"})
	m := rolloutFor(0, 15) // two chunks
	if _, err := c.PublishRollout(ctx, m); err != nil {
		t.Fatal(err)
	}
	d := receive(t, ctx, ch, 1, false)[0]
	quiet(t, ch, 1500*time.Millisecond) // two AckWaits: redelivered at least once, dropped
	if st := s.Stats(); st.DuplicateChunks == 0 {
		t.Fatalf("no redelivered chunk was seen: %+v", st)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	quiet(t, ch, 700*time.Millisecond)

	// The same rollout stored again under new message IDs.
	chunks, err := s.codec.message(&d.Rollout, CodecS2)
	if err != nil {
		t.Fatal(err)
	}
	for i, chunk := range chunks {
		if _, err := s.js.Publish(ctx, s.names.rolloutSubject("r"), chunk, jetstream.WithMsgID(fmt.Sprintf("again-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// And a chunk that is no rollout at all.
	if _, err := s.js.Publish(ctx, s.names.rolloutSubject("r"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	quiet(t, ch, 500*time.Millisecond)
	st := s.Stats()
	if st.Delivered != 1 || st.Duplicates < 1 || st.Corrupt != 1 {
		t.Errorf("stats %+v: want 1 delivered, ≥ 1 duplicate, 1 corrupt", st)
	}
	if n := streamMsgs(t, s); n != 0 {
		t.Errorf("the stream holds %d messages, want 0", n)
	}
}

// TestLearnerRestart closes the learner with a rollout delivered but not acked, and
// publishes another while no learner runs: a learner serving the same store on the same
// address gets both, once; the batcher reconnects by itself.
func TestLearnerRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := timeout(t, 30*time.Second)
	s1, err := Serve(ctx, fast(ServeConfig{StoreDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s1, ClientConfig{BatcherID: "r", Logger: zaptest.NewLogger(t)})
	ch, err := s1.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.PublishPolicy(ctx, 7, []byte("policy-v7")); err != nil {
		t.Fatal(err)
	}
	policies := c.WatchPolicy(ctx)
	if p := <-policies; p.Version != 7 {
		t.Fatalf("policy version %d, want 7", p.Version)
	}
	if _, err := c.PublishRollout(ctx, rolloutFor(0, 1)); err != nil {
		t.Fatal(err)
	}
	receive(t, ctx, ch, 1, false) // delivered, never acked
	addr := strings.TrimPrefix(s1.URL(), "nats://")
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // published while the learner is down: retried until it is back
		_, err := c.PublishRollout(ctx, rolloutFor(0, 2))
		if err == nil {
			err = c.Flush(ctx)
		}
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	restarted := time.Now()
	s2, err := Serve(ctx, fast(ServeConfig{StoreDir: dir, Addr: addr}))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if c2 := credsFor(t, s2, "r"); c2 != credsFor(t, s1, "r") || s2.CredsDir() != s1.CredsDir() {
		t.Errorf("credential moved from %s to %s", credsFor(t, s1, "r"), c2)
	}
	ch2, err := s2.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, timeout(t, 15*time.Second), ch2, 2, true)
	if err := <-done; err != nil {
		t.Fatalf("publishing across the restart: %v", err)
	}
	if got[0].Rollout.Seq != 1 || got[1].Rollout.Seq != 2 {
		t.Errorf("got seqs %d, %d; want 1, 2", got[0].Rollout.Seq, got[1].Rollout.Seq)
	}
	if since := time.Since(restarted); since > 10*time.Second {
		t.Errorf("the unacked rollout took %v to come back", since)
	}
	quiet(t, ch2, 300*time.Millisecond)

	// The restarted learner, resumed from an older checkpoint, publishes an older version:
	// the watcher follows it at once (its watch is renewed at the reconnection, not after the
	// old consumer's heartbeats time out).
	published := time.Now()
	if err := s2.PublishPolicy(ctx, 5, []byte("policy-v5")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-policies:
		if p.Version != 5 || string(p.ONNX) != "policy-v5" {
			t.Fatalf("after the restart: policy version %d %q, want 5", p.Version, p.ONNX)
		}
		t.Logf("the restarted learner's policy reached the watcher in %v", time.Since(published))
	case <-time.After(3 * time.Second):
		t.Fatal("the restarted learner's policy did not reach the watcher within 3 s")
	}
}

// TestBackpressure fills a small stream while the learner does not consume: the publisher
// blocks and retries instead of losing rollouts, and everything arrives once the learner
// drains the stream.
func TestBackpressure(t *testing.T) {
	s := serve(t, ServeConfig{StreamMaxBytes: 1 << 20})
	ctx := timeout(t, 30*time.Second)
	c := dial(t, s, ClientConfig{BatcherID: "p", Codec: CodecNone, MaxInFlight: 4})
	const n = 20
	roll := func(i uint64) RolloutMsg { return sampleRollout(64, 64, 4, i) } // ~230 KB
	done := make(chan error, 1)
	go func() {
		for i := uint64(1); i <= n; i++ {
			if _, err := c.PublishRollout(ctx, roll(i)); err != nil {
				done <- err
				return
			}
		}
		done <- c.Flush(ctx)
	}()
	// The publisher fills the stream, then retries (within 10 s on a loaded machine).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the publisher finished (%v) while the stream had room for a quarter of its rollouts", err)
		default:
		}
		st := c.Stats()
		if st.Retries > 0 && st.InFlight > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client stats %+v: want retries and chunks in flight", st)
		}
	}
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := receive(t, ctx, ch, n, true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for _, d := range got {
		if seen[d.Rollout.Seq] {
			t.Fatalf("rollout %d twice", d.Rollout.Seq)
		}
		seen[d.Rollout.Seq] = true
		want := roll(d.Rollout.Seq)
		want.BatcherID, want.Session, want.Seq = "p", c.Session(), d.Rollout.Seq
		if diff := diffRollout(want, d.Rollout); diff != "" {
			t.Fatalf("rollout %d: %s", d.Rollout.Seq, diff)
		}
	}
	quiet(t, ch, 200*time.Millisecond)
	t.Logf("client %+v", c.Stats())
}

func TestPermissions(t *testing.T) {
	s := serve(t, ServeConfig{})
	ctx := timeout(t, 20*time.Second)

	// No credential, and a credential of another learner.
	if _, err := Dial(ctx, s.URL(), ClientConfig{}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Dial without a credential: %v, want ErrUnauthorized", err)
	}
	other := t.TempDir()
	if _, _, err := issueCreds(other, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, s.URL(), ClientConfig{Creds: other + "/a" + CredsExt}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Dial with another run's credential: %v, want ErrUnauthorized", err)
	}

	// A batcher credential, used directly.
	nc, ce := rawConn(t, s, "a")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, s.names.runBucket())
	if err != nil {
		t.Fatalf("reading the run bucket: %v", err)
	}
	obj, err := js.ObjectStore(ctx, s.names.policyBucket())
	if err != nil {
		t.Fatalf("opening the policy store: %v", err)
	}
	short := func() context.Context { return timeout(t, 500*time.Millisecond) }
	for _, tc := range []struct {
		name    string
		do      func() error
		subject string
	}{
		{"delete the rollout stream", func() error { return js.DeleteStream(short(), s.names.rolloutStream()) },
			"$JS.API.STREAM.DELETE." + s.names.rolloutStream()},
		{"purge the rollout stream", func() error {
			st, err := js.Stream(short(), s.names.rolloutStream())
			if err != nil {
				return err // no stream info either: refused
			}
			return st.Purge(short())
		}, "$JS.API.STREAM."},
		{"move the policy pointer", func() error { _, err := kv.PutString(short(), keyPolicy, "{}"); return err },
			"$KV." + s.names.runBucket() + "." + keyPolicy},
		{"store a policy", func() error { _, err := obj.PutBytes(short(), "evil", []byte("x")); return err }, "$O." + s.names.policyBucket()},
		{"read rollouts", func() error {
			_, err := js.CreateOrUpdateConsumer(short(), s.names.rolloutStream(), jetstream.ConsumerConfig{Durable: "thief"})
			return err
		}, "$JS.API.CONSUMER.CREATE." + s.names.rolloutStream()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); err == nil {
				t.Fatal("allowed")
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if p := ce.permission(tc.subject); !errors.Is(p, ErrPermission) {
				t.Errorf("no permission violation naming %s was reported", tc.subject)
			} else {
				t.Logf("%v", p)
			}
		})
	}
	// Nor may it listen to the learner's replies (its pulled rollouts).
	if _, err := nc.SubscribeSync(learnerInbox + ".>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for ce.permission("Subscription to \""+learnerInbox) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ce.permission("Subscription to \""+learnerInbox) == nil {
		t.Error("a batcher subscribed to the learner's inbox")
	}
	// Still there, still the learner's.
	if n := streamMsgs(t, s); n != 0 {
		t.Errorf("stream holds %d messages", n)
	}
	if e, err := s.kv.Get(ctx, keyPolicy); err == nil {
		t.Errorf("policy pointer was set to %q", e.Value())
	}
}

func TestCoordinator(t *testing.T) {
	admit := func(r Registration) error {
		if r.EnvID != "CartPole-v1" || len(r.ObsShape) != 1 || r.ObsShape[0] != 4 {
			return fmt.Errorf("env %s with observations %v does not fit the learner's policy (CartPole-v1, observations [4])", r.EnvID, r.ObsShape)
		}
		return nil
	}
	s := serve(t, ServeConfig{Admit: admit})
	ctx := timeout(t, 20*time.Second)
	task := Task{ID: "t1", EnvID: "CartPole-v1", Seed: 42, Envs: 16, RolloutLen: 128, PolicyFloor: 3}
	if err := s.AddTask(task); err != nil {
		t.Fatal(err)
	}
	if err := s.AddTask(task); err == nil {
		t.Error("a duplicate task ID was accepted")
	}
	reg := Registration{EnvID: "CartPole-v1", ObsShape: []int{4}, ActionSpace: "discrete:2", Envs: 16}

	bad := dial(t, s, ClientConfig{BatcherID: "bad"})
	err := bad.Register(ctx, Registration{EnvID: "Pendulum-v1", ObsShape: []int{3}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "[3]") || !strings.Contains(err.Error(), "[4]") {
		t.Errorf("mismatched registration: %v, want ErrRefused naming both shapes", err)
	}
	if _, err := bad.Task(ctx); err == nil {
		t.Error("Task before a successful Register succeeded")
	}

	a := dial(t, s, ClientConfig{BatcherID: "a"})
	if err := a.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	ga, err := a.Task(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ga.Task != task {
		t.Errorf("a got %+v, want %+v", ga.Task, task)
	}

	b := dial(t, s, ClientConfig{BatcherID: "b"})
	if err := b.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	gotB := make(chan Assignment, 1)
	go func() {
		g, err := b.Task(ctx)
		if err != nil {
			t.Errorf("b.Task: %v", err)
		}
		gotB <- g
	}()
	select {
	case g := <-gotB:
		t.Fatalf("b got %+v while a holds the only task", g)
	case <-time.After(300 * time.Millisecond): // several heartbeats: a is alive
	}

	// a dies without leaving: after the heartbeat timeout b gets its task, next attempt.
	died := time.Now()
	a.nc.Close()
	var gb Assignment
	select {
	case gb = <-gotB:
		if g := gb; g.ID != "t1" || g.Attempt != 1 {
			t.Errorf("b got %+v, want t1 attempt 1", g.Task)
		}
		// Silent for the 400ms timeout: a's last heartbeat was at most 50ms before it died.
		if since := time.Since(died); since < 340*time.Millisecond {
			t.Errorf("reassigned %v after a died, before the heartbeat timeout", since)
		}
	case <-ctx.Done():
		t.Fatal("the dead batcher's task was never reassigned")
	}
	for _, st := range s.Batchers() {
		if st.BatcherID == "a" {
			t.Errorf("dead batcher still listed: %+v", st)
		}
	}

	// b is presumed dead while alive (the coordinator drops it and gives t1 to c): b's
	// next heartbeats re-register it and then tell it the task is lost.
	c := dial(t, s, ClientConfig{BatcherID: "c"})
	if err := c.Register(ctx, reg); err != nil {
		t.Fatal(err)
	}
	co := s.coord
	co.mu.Lock()
	mb, mc := co.members[sessionKey{"b", b.Session()}], co.members[sessionKey{"c", c.Session()}]
	co.drop(sessionKey{"b", b.Session()}, mb)
	co.assign(co.slot("t1"), mc)
	co.mu.Unlock()
	select {
	case <-gb.Lost:
	case <-ctx.Done():
		t.Fatal("b was never told its task was lost")
	}
	gc, err := c.Task(ctx)
	if err != nil || gc.ID != "t1" || gc.Attempt != 2 {
		t.Errorf("c.Task = %+v, %v; want t1 attempt 2", gc.Task, err)
	}
	if sts := s.Batchers(); len(sts) != 2 || sts[0].BatcherID != "b" || sts[0].Task != "" || sts[1].Task != "t1" {
		t.Errorf("batchers %+v, want b (no task, registered again) and c (t1)", sts)
	}

	// c leaves: the task is free at once.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := b.Task(timeout(t, 2*time.Second))
	if err != nil || g.ID != "t1" {
		t.Errorf("after c left, b.Task = %+v, %v", g, err)
	}
}

func TestRunEnd(t *testing.T) {
	s := serve(t, ServeConfig{})
	ctx := timeout(t, 20*time.Second)
	c := dial(t, s, ClientConfig{BatcherID: "e"})
	if err := c.Register(ctx, Registration{EnvID: "CartPole-v1"}); err != nil {
		t.Fatal(err)
	}
	policies := c.WatchPolicy(ctx)
	info := c.Info(ctx)
	taskErr := make(chan error, 1)
	go func() { _, err := c.Task(ctx); taskErr <- err }() // no task: waits

	if err := c.nc.Flush(); err != nil { // the info subscription is in place
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.PublishInfo([]byte(fmt.Sprintf(`{"iteration":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		select {
		case line := <-info:
			if want := fmt.Sprintf(`{"iteration":%d}`, i); string(line) != want {
				t.Errorf("info line %q, want %q", line, want)
			}
		case <-ctx.Done():
			t.Fatal("learn-info did not arrive")
		}
	}

	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan struct{}{"Done": c.Done()} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s not closed", name)
		}
	}
	if err := <-taskErr; !errors.Is(err, ErrRunEnded) {
		t.Errorf("Task: %v, want ErrRunEnded", err)
	}
	for range policies { // closed
	}
	for range info {
	}
	if _, err := c.PublishRollout(ctx, rolloutFor(0, 1)); !errors.Is(err, ErrRunEnded) {
		t.Errorf("PublishRollout after the end: %v, want ErrRunEnded", err)
	}
	late := dial(t, s, ClientConfig{BatcherID: "late"})
	select {
	case <-late.Done():
	case <-ctx.Done():
		t.Fatal("a batcher connecting after the end was not told")
	}
	if err := late.Register(ctx, Registration{EnvID: "CartPole-v1"}); !errors.Is(err, ErrRunEnded) {
		t.Errorf("Register after the end: %v, want ErrRunEnded", err)
	}
}

// TestExternal runs the learner's side against a NATS server it does not own (no
// authentication), as with train --nats URL.
func TestExternal(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	ctx := timeout(t, 20*time.Second)
	if _, err := Connect(ctx, ns.ClientURL(), "", ServeConfig{StoreDir: "x"}); err == nil || !strings.Contains(err.Error(), "StoreDir") {
		t.Errorf("Connect with a StoreDir: %v, want an error naming StoreDir", err)
	}
	s, err := Connect(ctx, ns.ClientURL(), "", fast(ServeConfig{Namespace: "ext"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := Dial(ctx, ns.ClientURL(), ClientConfig{Namespace: "ext", BatcherID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.PublishPolicy(ctx, 3, []byte("model")); err != nil {
		t.Fatal(err)
	}
	if p := <-c.WatchPolicy(ctx); p.Version != 3 || string(p.ONNX) != "model" {
		t.Errorf("policy %d %q", p.Version, p.ONNX)
	}
	ch, err := s.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishRollout(ctx, rolloutFor(1, 1)); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, ctx, ch, 1, true)[0]; d.Rollout.BatcherID != "x" {
		t.Errorf("rollout from %q", d.Rollout.BatcherID)
	}
}

func TestServeConfigErrors(t *testing.T) {
	ctx := timeout(t, 10*time.Second)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  ServeConfig
		want string
	}{
		{"no store", ServeConfig{}, "StoreDir"},
		{"bad addr", ServeConfig{StoreDir: dir, Addr: "localhost"}, "Addr"},
		{"bad port", ServeConfig{StoreDir: dir, Addr: "127.0.0.1:99999"}, "Addr"},
		{"cert without key", ServeConfig{StoreDir: dir, TLSCert: "c.pem"}, "TLSKey"},
		{"heartbeat", ServeConfig{StoreDir: dir, HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second}, "HeartbeatTimeout"},
		{"namespace", ServeConfig{StoreDir: dir, Namespace: "a.b"}, "namespace"},
		{"missing cert", ServeConfig{StoreDir: dir, TLSCert: dir + "/no.pem", TLSKey: dir + "/no.key"}, "TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Serve(ctx, tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
	t.Run("port in use", func(t *testing.T) {
		s1 := serve(t, ServeConfig{})
		_, err := Serve(ctx, ServeConfig{StoreDir: t.TempDir(), Addr: strings.TrimPrefix(s1.URL(), "nats://")})
		if err == nil || !strings.Contains(err.Error(), "did not start") {
			t.Errorf("Serve on a port in use: %v", err)
		}
	})
}
