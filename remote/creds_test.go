package remote

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// eventually waits up to 3 s for f to hold.
func eventually(f func() bool) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return f()
}

// TestCredentialsBound is the test client of issue 28 item 9f: with the one credential all
// batchers shared, any batcher could read every other's coordinator replies on _INBOX.> and
// act under another's ID. Now each batcher has its own credential, and a client holding one
// ("evil", with nats.go) can neither read the honest batcher's replies (subscribing to
// _INBOX.>, everything, or the honest batcher's inbox is refused by the server) nor register,
// heartbeat, ask credits, take tasks, leave or publish rollouts as the honest batcher: the
// server refuses its publishes under the honest ID, and what it sends under its own subjects
// naming the honest batcher is refused or acts on its own ID. The honest batcher keeps its
// session, its task and its credit throughout.
func TestCredentialsBound(t *testing.T) {
	s, ctx, src, honest := holdingCredit(t, ServeConfig{Credits: 1, HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Minute},
		60*time.Second, "honest") // it holds the only credit

	nc, ce := rawConn(t, s, "evil")
	refusedAs := func(what, subject string) {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		text := what + " to \"" + subject + "\""
		if !eventually(func() bool { return ce.permission(text) != nil }) {
			t.Errorf("%s was not refused", text)
		}
	}

	// Reading others' replies.
	var subs []*nats.Subscription
	for _, subject := range []string{"_INBOX.>", ">", s.names.inboxes() + ">", s.names.inbox("honest") + ".>",
		s.names.coordAll(verbRegister), s.names.rolloutSubjects()} {
		sub, err := nc.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
		refusedAs("Subscription", subject)
	}
	time.Sleep(300 * time.Millisecond) // the honest batcher heartbeats meanwhile: its replies reach none of them
	for _, sub := range subs {
		if m, err := sub.NextMsg(10 * time.Millisecond); err == nil {
			t.Errorf("subscription %s received %s: %q", sub.Subject, m.Subject, m.Data)
		}
	}

	// Acting under the honest batcher's subjects.
	member, _ := json.Marshal(memberReq{Batcher: "honest", Session: honest.Session(), Task: "t"})
	for _, verb := range []string{verbRegister, verbHeartbeat, verbTask, verbCredit, verbLeave} {
		subject := s.names.coord("honest", verb)
		if err := nc.PublishRequest(subject, nc.NewRespInbox(), member); err != nil {
			t.Fatal(err)
		}
		refusedAs("Publish", subject)
	}
	if err := nc.Publish(s.names.rolloutSubject("honest"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	refusedAs("Publish", s.names.rolloutSubject("honest"))

	// Naming the honest batcher in requests under its own subjects.
	ask := func(verb string, req any, reply any) {
		t.Helper()
		b, _ := json.Marshal(req)
		m, err := nc.Request(s.names.coord("evil", verb), b, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		if err := json.Unmarshal(m.Data, reply); err != nil {
			t.Fatalf("%s: %q: %v", verb, m.Data, err)
		}
	}
	var reg registerReply
	ask(verbRegister, Registration{BatcherID: "honest", Session: 7, EnvID: "CartPole-v1"}, &reg)
	if !strings.Contains(reg.Error, "its own batcher ID only") {
		t.Errorf("registering as the honest batcher: %+v, want refused", reg)
	}
	var beat beatReply
	ask(verbHeartbeat, memberReq{Batcher: "honest", Session: honest.Session(), Task: "t"}, &beat)
	if !beat.Unknown {
		t.Errorf("a heartbeat naming the honest batcher: %+v, want unknown (it acts on evil's sessions)", beat)
	}
	var task taskReply
	ask(verbTask, memberReq{Batcher: "honest", Session: honest.Session()}, &task)
	if task.Task != nil || !task.Unknown {
		t.Errorf("a task request naming the honest batcher: %+v, want unknown", task)
	}
	var credit creditReply
	ask(verbCredit, creditReq{Batcher: "honest", Session: honest.Session(), N: 1}, &credit)
	if credit.Granted || !credit.Unknown {
		t.Errorf("a credit request naming the honest batcher: %+v, want unknown", credit)
	}
	b, _ := json.Marshal(memberReq{Batcher: "honest", Session: honest.Session()})
	if err := nc.Publish(s.names.coord("evil", verbLeave), b); err != nil {
		t.Fatal(err)
	}
	// A request of its own whose reply would go to the honest batcher's inbox: not answered.
	reg2, _ := json.Marshal(Registration{BatcherID: "evil", Session: 8, EnvID: "CartPole-v1"})
	if err := nc.PublishRequest(s.names.coord("evil", verbRegister), s.names.inbox("honest")+".x", reg2); err != nil {
		t.Fatal(err)
	}
	// A rollout on its own subject that claims to be the honest batcher's: refused, counted
	// against evil.
	h := newHostile(t, s)
	m := pack(t, "CartPole-v1", cartPoleRollout(4, 2, 0, 1))
	m.BatcherID, m.Session, m.Seq = "honest", honest.Session(), 1
	chunks, err := h.codec.message(&m, CodecS2)
	if err != nil {
		t.Fatal(err)
	}
	h.raw("evil", "evil-claims-honest", chunks[0])
	if !eventually(func() bool { return s.Stats().RefusedReasons[refusedID] == 1 }) {
		t.Errorf("a chunk claiming another batcher's ID: refused %v, want one for %q", s.Stats().RefusedReasons, refusedID)
	}
	if st := s.Stats(); st.RefusedBatchers["evil"] != 1 || st.RefusedBatchers["honest"] != 0 {
		t.Errorf("refused by batcher %v, want the one counted against evil", st.RefusedBatchers)
	}

	// The honest batcher is undisturbed: same session, its task, its credit (a second
	// credit request with the same number is granted again, not queued).
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	var found []BatcherStatus
	for _, b := range s.Batchers() {
		if b.BatcherID == "honest" || b.BatcherID == "evil" {
			found = append(found, b)
		}
	}
	if len(found) != 1 || found[0].Session != honest.Session() || found[0].Task != "t" {
		t.Errorf("registered: %+v, want the honest batcher alone, its session and task kept", found)
	}
	honest.coordMu.Lock()
	honest.credits = 0 // ask for credit 1 again: the one it holds
	honest.coordMu.Unlock()
	granted(t, askCredit(ctx, honest), 0)
	if _, err := honest.PublishRollout(ctx, pack(t, "CartPole-v1", cartPoleRollout(4, 2, 0, 1))); err != nil {
		t.Fatal(err)
	}
	r, err := src.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.BatcherID != "honest" || r.Session != honest.Session() {
		t.Errorf("the learner got a rollout of %s/%x, want the honest batcher's", r.BatcherID, r.Session)
	}
}

// TestCredentialFiles: Serve writes one credential per batcher ID, mode 0600, naming its
// ID; a restarted learner accepts them again (an earlier learner's too, beyond Batchers), but
// not one whose file was deleted (revoked);
// a batcher takes its ID from the credential and refuses another given with it; the one
// credential all batchers shared before is refused, saying what to do.
func TestCredentialFiles(t *testing.T) {
	dir := t.TempDir()
	ctx := timeout(t, 30*time.Second)
	s1 := serve(t, ServeConfig{StoreDir: dir, Batchers: []string{"batcher-0", "batcher-1"}})
	for _, id := range []string{"batcher-0", "batcher-1"} {
		path := filepath.Join(dir, id+CredsExt)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", path, fi.Mode().Perm())
		}
		if got, err := CredsID(path); err != nil || got != id {
			t.Errorf("CredsID(%s) = %q, %v; want %q", path, got, err, id)
		}
	}
	if _, err := s1.AddBatcher("a.b"); err == nil {
		t.Error("AddBatcher accepted the ID a.b")
	}
	extra := credsFor(t, s1, "extra")
	before, err := os.ReadFile(extra)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(s1.URL(), "nats://")
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	// Revoking: batcher-1's file deleted while the learner is down (a copy kept).
	revoked := filepath.Join(t.TempDir(), "batcher-1.creds")
	b1, err := os.ReadFile(filepath.Join(dir, "batcher-1.creds"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(revoked, b1, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "batcher-1.creds")); err != nil {
		t.Fatal(err)
	}
	s2 := serve(t, ServeConfig{StoreDir: dir, Addr: addr, Batchers: []string{"batcher-0"}})
	if _, err := Dial(ctx, s2.URL(), ClientConfig{Creds: revoked}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Dial with a revoked credential: %v, want ErrUnauthorized", err)
	}
	if after, err := os.ReadFile(extra); err != nil || string(after) != string(before) {
		t.Errorf("the restarted learner rewrote %s (%v)", extra, err)
	}
	c, err := Dial(ctx, s2.URL(), ClientConfig{Creds: extra})
	if err != nil {
		t.Fatalf("an earlier learner's credential: %v", err)
	}
	if c.ID() != "extra" {
		t.Errorf("the batcher's ID is %q, want extra (the credential's)", c.ID())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, s2.URL(), ClientConfig{Creds: extra, BatcherID: "batcher-0"}); err == nil || !strings.Contains(err.Error(), `credential of batcher "extra"`) {
		t.Errorf("Dial with another ID than the credential's: %v", err)
	}
	// The shared credential of earlier versions: a bare seed naming no ID.
	old := filepath.Join(t.TempDir(), "batcher.creds")
	b, err := os.ReadFile(extra)
	if err != nil {
		t.Fatal(err)
	}
	var seed string
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, "SU") {
			seed = line
		}
	}
	if err := os.WriteFile(old, []byte("# towerrl batcher credential\n"+seed), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Dial(ctx, s2.URL(), ClientConfig{Creds: old, BatcherID: "extra"}); err != nil {
		// The key is extra's, so the server accepts it; the ID must be given.
		t.Errorf("a bare seed with its batcher's ID: %v", err)
	} else if err := c.Close(); err != nil {
		t.Error(err)
	}
	unknown := filepath.Join(t.TempDir(), "batcher.creds")
	if _, _, err := issueCreds(filepath.Dir(unknown), "batcher"); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(ctx, s2.URL(), ClientConfig{Creds: unknown}); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "one per batcher") {
		t.Errorf("Dial with a credential the learner never issued: %v", err)
	}
	// A file in the credentials folder that names no ID stops Serve, saying what to do.
	if err := os.WriteFile(filepath.Join(dir, "batcher.creds"), []byte("# towerrl batcher credential\n"+seed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	if s3, err := Serve(ctx, fast(ServeConfig{StoreDir: dir})); err == nil {
		s3.Close()
		t.Error("Serve accepted a credential naming no batcher ID")
	} else if !strings.Contains(err.Error(), "names no batcher ID") {
		t.Errorf("Serve with a credential naming no ID: %v", err)
	}
}

// TestExternalPermissions: an external NATS server whose operator gives the learner a user
// and batcher x a user with BatcherPermissions("ext", "x"), as docs/distributed.md says: the
// batcher (its bare NKey seed names no ID: it is started with --id x) registers, takes a
// task and a credit, reads the policy and publishes a rollout; started as y with x's user, it
// is refused by the server with advice naming --id; and x's user cannot read y's inbox.
func TestExternalPermissions(t *testing.T) {
	dir := t.TempDir()
	seedFile := func(name string) (string, string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		path := filepath.Join(dir, name+".nk")
		if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		return path, pub
	}
	learnerSeed, learnerPub := seedFile("learner")
	xSeed, xPub := seedFile("x")
	pubs, subs, deny, err := BatcherPermissions("ext", "x")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true, Nkeys: []*server.NkeyUser{
			{Nkey: learnerPub},
			{Nkey: xPub, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: pubs, Deny: deny},
				Subscribe: &server.SubjectPermission{Allow: subs},
			}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	ctx := timeout(t, 30*time.Second)
	s, err := Connect(ctx, ns.ClientURL(), learnerSeed, fast(ServeConfig{Namespace: "ext", Credits: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AddBatcher("x"); err == nil {
		t.Error("AddBatcher on an external server: no error")
	}
	if err := s.AddTask(Task{ID: "t", EnvID: "CartPole-v1", Envs: 2, RolloutLen: 4}); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishPolicy(ctx, 1, []byte("model")); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	c, err := Dial(ctx, ns.ClientURL(), ClientConfig{Namespace: "ext", Creds: xSeed, BatcherID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Register(ctx, Registration{EnvID: "CartPole-v1"}); err != nil {
		t.Fatal(err)
	}
	if task, err := c.Task(ctx); err != nil || task.ID != "t" {
		t.Fatalf("task %+v, %v", task, err)
	}
	if _, err := c.Credit(ctx); err != nil {
		t.Fatal(err)
	}
	if p := <-c.WatchPolicy(ctx); p.Version != 1 || string(p.ONNX) != "model" {
		t.Errorf("policy %d %q", p.Version, p.ONNX)
	}
	if _, err := c.PublishRollout(ctx, pack(t, "CartPole-v1", cartPoleRollout(4, 2, 1, 1))); err != nil {
		t.Fatal(err)
	}
	if r, err := src.Next(ctx); err != nil || r.BatcherID != "x" {
		t.Fatalf("rollout %v, %v", r, err)
	}

	// x's user started as y: its inbox and subjects are not x's, so the server refuses.
	if y, err := Dial(ctx, ns.ClientURL(), ClientConfig{Namespace: "ext", Creds: xSeed, BatcherID: "y"}); err != nil {
		t.Errorf("Dial as y: %v", err)
	} else {
		_, err := RunBatcher(ctx, ns.ClientURL(), BatcherConfig{Client: ClientConfig{Namespace: "ext", Creds: xSeed, BatcherID: "y"}, ConnectTimeout: 3 * time.Second})
		if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "--id") {
			t.Errorf("a batcher started as y with x's user: %v, want a permission error naming --id", err)
		}
		if err := y.Close(); err != nil {
			t.Error(err)
		}
	}
	opt, _, err := credsOption(xSeed)
	if err != nil {
		t.Fatal(err)
	}
	ce := &connErrors{}
	nc, err := nats.Connect(ns.ClientURL(), opt, nats.ErrorHandler(ce.handler), nats.CustomInboxPrefix("ext.inbox.x"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subject := range []string{"_INBOX.>", "ext.inbox.y.>"} {
		if _, err := nc.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if !eventually(func() bool { return ce.permission("Subscription to \""+subject) != nil }) {
			t.Errorf("x's user subscribed to %s", subject)
		}
	}
}
