package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

const (
	policyV1 = "../testdata/mlp_tanh.onnx"
	policyV2 = "../testdata/foreign/cleanrl_cartpole.onnx"
)

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// batcherConfig is a RunBatcher configuration for tests: fast retries, the Server's
// credential.
func batcherConfig(t testing.TB, s *Server, id string) BatcherConfig {
	return BatcherConfig{
		Client:         ClientConfig{Creds: credsFor(t, s, id), BatcherID: id, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond},
		Workers:        2,
		ConnectTimeout: 10 * time.Second,
		Logger:         zaptest.NewLogger(t).Named(id),
	}
}

type runResult struct {
	sum BatcherSummary
	err error
}

// startBatcher runs RunBatcher on a goroutine; the result arrives on the channel.
func startBatcher(ctx context.Context, url string, cfg BatcherConfig) <-chan runResult {
	out := make(chan runResult, 1)
	go func() {
		sum, err := RunBatcher(ctx, url, cfg)
		out <- runResult{sum, err}
	}()
	return out
}

// TestRunBatcherEndToEnd: a learner serves two tasks and a policy; two RunBatchers take
// them, collect and publish; the learner's Source hands out rollouts equal bit for bit to
// what a local batcher with the task's seed collects, hot-swaps to a second policy (rows
// carry its version and its actions), never hands a rollout out twice (one is held past
// AckWait, so JetStream redelivers it), and both RunBatchers return nil after End.
func TestRunBatcherEndToEnd(t *testing.T) {
	s := serve(t, ServeConfig{AckWait: 300 * time.Millisecond})
	ctx := timeout(t, 90*time.Second)
	tasks := map[string]Task{
		"t1": {ID: "t1", EnvID: "CartPole-v1", Seed: 11, Envs: 6, RolloutLen: 20, PolicyFloor: 1},
		"t2": {ID: "t2", EnvID: "CartPole-v1", Seed: 22, Envs: 4, RolloutLen: 16, PolicyFloor: 1},
	}
	for _, id := range []string{"t1", "t2"} {
		if err := s.AddTask(tasks[id]); err != nil {
			t.Fatal(err)
		}
	}
	models := map[int64][]byte{0: readFile(t, policyV1), 1: readFile(t, policyV1), 2: readFile(t, policyV2)}
	// Version 0 is below the tasks' floor: the batchers wait for version 1.
	if err := s.PublishPolicy(ctx, 0, models[0]); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	runs := map[string]<-chan runResult{}
	for _, id := range []string{"b1", "b2"} {
		cfg := batcherConfig(t, s, id)
		cfg.Progress = func(BatcherProgress) { time.Sleep(10 * time.Millisecond) } // about 100 rollouts/s, to keep the replay short
		runs[id] = startBatcher(ctx, s.URL(), cfg)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case r, ok := <-src.ch:
		t.Fatalf("a rollout arrived (%v) before a policy of the tasks' floor was published", ok && r != nil)
	default:
	}
	if err := s.PublishPolicy(ctx, 1, models[1]); err != nil {
		t.Fatal(err)
	}

	got := map[string][]*Received{} // by batcher, in arrival order
	seen := map[rolloutKey]bool{}
	var held *Received
	var heldAt time.Time
	swapped := false
	for {
		r, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		key := rolloutKey{r.BatcherID, r.Session, r.Seq}
		if seen[key] {
			t.Fatalf("rollout %v handed out twice", key)
		}
		seen[key] = true
		got[r.BatcherID] = append(got[r.BatcherID], r)
		if held == nil {
			held, heldAt = r, time.Now() // acknowledged after two AckWaits
		} else if err := r.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if held != nil && held != r && time.Since(heldAt) > 800*time.Millisecond {
			if err := held.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			held = nil
			heldAt = time.Now().Add(time.Hour)
		}
		if !swapped && len(got["b1"]) >= 3 && len(got["b2"]) >= 3 {
			if err := s.PublishPolicy(ctx, 2, models[2]); err != nil {
				t.Fatal(err)
			}
			swapped = true
		}
		if swapped && held == nil && countVersion(got["b1"], 2) >= 3 && countVersion(got["b2"], 2) >= 3 {
			break
		}
	}
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	sums := map[string]BatcherSummary{}
	for id, ch := range runs {
		select {
		case res := <-ch:
			if res.err != nil {
				t.Fatalf("%s: RunBatcher: %v", id, res.err)
			}
			sums[id] = res.sum
		case <-ctx.Done():
			t.Fatalf("%s: RunBatcher did not return after End", id)
		}
	}
	st := src.Stats()
	if st.Duplicates == 0 && st.DuplicateChunks == 0 {
		t.Errorf("the rollout held past AckWait was never redelivered: %+v", st.Stats)
	}
	if st.Malformed != 0 || st.Corrupt != 0 {
		t.Errorf("stats %+v", st)
	}

	// Each batcher's rollouts, against a local batcher with its task's seed that swaps
	// policies where the remote one did.
	for id, rs := range got {
		sum := sums[id]
		if sum.Workers != 2 || sum.Workers*sum.EnvsPerWorker != tasks[sum.Tasks[0]].Envs {
			t.Errorf("%s: %d workers × %d envs", id, sum.Workers, sum.EnvsPerWorker)
		}
		if sum.Ended != "run ended" || len(sum.Tasks) != 1 || sum.Rollouts < int64(len(rs)) || sum.Confirmed != sum.Rollouts ||
			sum.PolicySwaps != 1 || sum.PolicyVersion != 2 || sum.Steps == 0 || sum.BytesPerRollout == 0 {
			t.Errorf("%s: summary %+v", id, sum)
		}
		task := tasks[sum.Tasks[0]]
		if task.Attempt != 0 || TaskSeed(task) != task.Seed {
			t.Fatalf("task %+v", task)
		}
		slices.SortFunc(rs, func(a, b *Received) int { return int(a.Seq) - int(b.Seq) })
		// The reference's policies are built as RunBatcher builds them (weights laid out
		// for in-place swaps, which ONNX Runtime may run with other kernels than constants).
		spec, err := envs.Lookup(task.EnvID)
		if err != nil {
			t.Fatal(err)
		}
		ps := &policies{spec: spec, log: zap.NewNop()}
		build := func(v int64) *bind.Policy {
			p, err := ps.build(ctx, Policy{Version: v, ONNX: models[v]}, bind.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		ref := newBatcher(t, batcher.Config{Env: envSpec(task.EnvID), Workers: sum.Workers, EnvsPerWorker: sum.EnvsPerWorker, Steps: task.RolloutLen, Seed: task.Seed},
			build(1))
		version := int64(1)
		for i, r := range rs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("%s: rollouts %d… then %d: one is missing", id, i, r.Seq)
			}
			if v := r.Rollout.Version[0]; v != version {
				if v != 2 {
					t.Fatalf("%s rollout %d: version %d", id, r.Seq, v)
				}
				if err := ref.UpdatePolicy(ctx, build(2)); err != nil {
					t.Fatal(err)
				}
				version = v
			}
			want, err := ref.Collect(ctx, task.RolloutLen)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffRollouts(want, r.Rollout); d != "" {
				t.Fatalf("%s rollout %d differs from the local batcher's (-local +remote):\n%s", id, r.Seq, d)
			}
			if r.PolicyVersion != version || r.EnvID != task.EnvID || r.Bytes == 0 || r.Latency < 0 {
				t.Errorf("%s rollout %d: %+v", id, r.Seq, r)
			}
		}
		t.Logf("%s: %d rollouts received, summary %+v", id, len(rs), sum)
	}
}

func countVersion(rs []*Received, v int64) int {
	n := 0
	for _, r := range rs {
		if r.PolicyVersion == v {
			n++
		}
	}
	return n
}

// TestRunBatcherErrors: what goes wrong before collecting says what to do.
func TestRunBatcherErrors(t *testing.T) {
	admit := func(r Registration) error {
		if r.EnvID != "" && r.EnvID != "CartPole-v1" {
			return fmt.Errorf("env %s with observations %v does not fit the learner's policy (CartPole-v1, observations [4])", r.EnvID, r.ObsShape)
		}
		return nil
	}
	s := serve(t, ServeConfig{Admit: admit})
	ctx := timeout(t, 30*time.Second)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "nats://" + l.Addr().String()
	l.Close()
	other := t.TempDir()
	if _, _, err := issueCreds(other, "e"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		url  string
		edit func(*BatcherConfig)
		is   error
		want []string
	}{
		{"no credential", "", func(c *BatcherConfig) { c.Client.Creds = "" }, ErrUnauthorized, []string{"DIR/creds/batcher-K.creds"}},
		{"another run's credential", "", func(c *BatcherConfig) { c.Client.Creds = other + "/e.creds" }, ErrUnauthorized, []string{"refused credential"}},
		{"another batcher's credential", "", func(c *BatcherConfig) { c.Client.Creds = credsFor(t, s, "f") }, nil, []string{`credential of batcher "f"`, "--id"}},
		{"missing credential file", "", func(c *BatcherConfig) { c.Client.Creds = other + "/nope.creds" }, nil, []string{"nope.creds"}},
		{"nothing listening", closed, func(c *BatcherConfig) { c.ConnectTimeout = 400 * time.Millisecond }, ErrUnreachable,
			[]string{closed, "train --serve", "--connect-timeout"}},
		{"env refused", "", func(c *BatcherConfig) { c.Env = envtest.Lookup(t, "Pendulum-v1") }, ErrRefused, []string{"[3]", "[4]", "Pendulum-v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := batcherConfig(t, s, "e")
			tc.edit(&cfg)
			url := tc.url
			if url == "" {
				url = s.URL()
			}
			_, err := RunBatcher(ctx, url, cfg)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("RunBatcher: %v, want %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestRunBatcherStopAndLost: a task the coordinator gives to another batcher is dropped and
// the batcher takes the next one free, with its own seed; Stop ends the run cleanly, and
// the batcher leaves the coordinator at once.
func TestRunBatcherStopAndLost(t *testing.T) {
	s := serve(t, ServeConfig{HeartbeatTimeout: 10 * time.Second}) // nobody is presumed dead by the clock
	ctx := timeout(t, 60*time.Second)
	for _, task := range []Task{
		{ID: "a", EnvID: "CartPole-v1", Seed: 1, Envs: 2, RolloutLen: 8},
		{ID: "b", EnvID: "CartPole-v1", Seed: 2, Envs: 2, RolloutLen: 8},
	} {
		if err := s.AddTask(task); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PublishPolicy(ctx, 1, readFile(t, policyV1)); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	stop := make(chan struct{})
	cfg := batcherConfig(t, s, "x")
	cfg.Stop = stop
	var mu sync.Mutex
	var progress []BatcherProgress
	cfg.Progress = func(p BatcherProgress) { mu.Lock(); progress = append(progress, p); mu.Unlock() }
	run := startBatcher(ctx, s.URL(), cfg)
	next := func() *Received {
		r, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		return r
	}
	next()
	// The coordinator presumes x dead and gives its task a to y.
	y := dial(t, s, ClientConfig{BatcherID: "y"})
	if err := y.Register(ctx, Registration{EnvID: "CartPole-v1"}); err != nil {
		t.Fatal(err)
	}
	co := s.coord
	co.mu.Lock()
	var holder sessionKey
	for k, m := range co.members {
		if m.task != nil && m.task.task.ID == "a" {
			holder = k
		}
	}
	if holder.batcher != "x" {
		co.mu.Unlock()
		t.Fatalf("task a is held by %v", holder)
	}
	co.drop(holder, co.members[holder])
	co.assign(co.slot("a"), co.members[sessionKey{"y", y.Session()}])
	co.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sts := s.Batchers()
		if len(sts) == 2 && sts[0].BatcherID == "x" && sts[0].Task == "b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batcher never moved to another task: %+v", sts)
		}
		next()
	}
	close(stop)
	var res runResult
	for done := false; !done; {
		select {
		case res = <-run:
			done = true
		case <-time.After(50 * time.Millisecond):
			if r, err := src.Next(timeout(t, 100*time.Millisecond)); err == nil {
				r.Ack(ctx)
			}
		}
	}
	if res.err != nil || res.sum.Ended != "stopped" {
		t.Fatalf("RunBatcher after Stop: %+v, %v", res.sum, res.err)
	}
	if tasks := strings.Join(res.sum.Tasks, ","); !strings.HasPrefix(tasks, "a,") || !strings.Contains(tasks, "b") {
		t.Errorf("tasks held %s, want a then b", tasks)
	}
	// Its leave message is handled by the coordinator soon after (the heartbeat timeout is
	// 10 s).
	for gone := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sts := s.Batchers()
		if len(sts) == 1 && sts[0].BatcherID == "y" {
			break
		}
		if time.Now().After(gone) {
			t.Fatalf("still registered after Stop: %+v", sts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	last := progress[len(progress)-1]
	if last.Rollouts != res.sum.Rollouts || last.BatcherID != "x" || last.Steps != res.sum.Steps || last.StepsPerSec() <= 0 {
		t.Errorf("last progress %+v, summary %+v", last, res.sum)
	}
}

// BenchmarkRunBatcher collects CartPole rollouts (64 envs × 128 steps, the MLP policy, one
// worker) locally (batcher.Collect) and remotely (RunBatcher publishing to a learner in this
// process over loopback, a Source handing them out and acknowledging stacks of 8), and
// reports env steps/s, rollouts/s and, for the remote one, wire bytes per rollout and the
// time rollouts queued for the learner. remote/local steps/s is the transport's cost.
func BenchmarkRunBatcher(b *testing.B) {
	const envsN, steps = 64, 128
	b.Run("local", func(b *testing.B) {
		bt := newBatcher(b, batcher.Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: envsN, Steps: steps, Seed: 1},
			loadPolicy(b, policyV1, "CartPole-v1", 1))
		for b.Loop() {
			if _, err := bt.Collect(context.Background(), steps); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*envsN*steps)/b.Elapsed().Seconds(), "steps/s")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rollouts/s")
	})
	b.Run("remote", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := Serve(ctx, ServeConfig{StoreDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.AddTask(Task{ID: "t", EnvID: "CartPole-v1", Seed: 1, Envs: envsN, RolloutLen: steps}); err != nil {
			b.Fatal(err)
		}
		if err := s.PublishPolicy(ctx, 1, readFile(b, policyV1)); err != nil {
			b.Fatal(err)
		}
		src, err := NewSource(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		run := startBatcher(ctx, s.URL(), BatcherConfig{Client: ClientConfig{Creds: credsFor(b, s, "bench")}})
		first, err := src.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := first.Ack(ctx); err != nil {
			b.Fatal(err)
		}
		var stack []*Received
		var bytes int64
		var queued time.Duration
		for b.Loop() {
			r, err := src.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			bytes += int64(r.Bytes)
			queued += r.Latency
			if stack = append(stack, r); len(stack) == 8 {
				if err := src.AckAll(ctx, stack...); err != nil {
					b.Fatal(err)
				}
				stack = stack[:0]
			}
		}
		elapsed := b.Elapsed()
		if err := src.AckAll(ctx, stack...); err != nil {
			b.Fatal(err)
		}
		if err := s.End(ctx); err != nil {
			b.Fatal(err)
		}
		res := <-run
		if res.err != nil {
			b.Fatal(res.err)
		}
		b.ReportMetric(float64(b.N*envsN*steps)/elapsed.Seconds(), "steps/s")
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rollouts/s")
		b.ReportMetric(float64(bytes)/float64(b.N), "wire-B/rollout")
		b.ReportMetric(float64(res.sum.RawBytes)/float64(res.sum.Rollouts), "raw-B/rollout")
		b.ReportMetric(float64(queued.Microseconds())/float64(b.N)/1e3, "queued-ms")
		b.ReportMetric(res.sum.HandoffSeconds/(res.sum.CollectSeconds+res.sum.HandoffSeconds), "handoff-share")
		b.ReportMetric(res.sum.PublishSeconds/res.sum.CollectSeconds, "publish/collect")
	})
}
