package remote

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// Environment of a chaos batcher process (TestChaos starts the test binary again with it).
const (
	chaosURL    = "TOWERRL_CHAOS_URL"
	chaosCreds  = "TOWERRL_CHAOS_CREDS"
	chaosID     = "TOWERRL_CHAOS_ID"
	chaosLedger = "TOWERRL_CHAOS_LEDGER"
	// TOWERRL_CHAOS_SECONDS lengthens the run (scripts/remote_chaos.sh).
	chaosSeconds = "TOWERRL_CHAOS_SECONDS"
)

// chaosBatcher is the body of a batcher process: RunBatcher, writing after each rollout
// "SESSION SEQ LAST" to its ledger: SEQ is the rollout published, LAST the newest rollout the
// server confirmed stored (with every rollout published before it). At the end it writes
// "SESSION 0 LAST". A SIGKILL may cut the last line.
func chaosBatcher() {
	ledger, err := os.OpenFile(os.Getenv(chaosLedger), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg := BatcherConfig{
		Client:         ClientConfig{Creds: os.Getenv(chaosCreds), BatcherID: os.Getenv(chaosID), RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond},
		Workers:        2,
		ConnectTimeout: 20 * time.Second,
		Progress: func(p BatcherProgress) {
			fmt.Fprintf(ledger, "%x %d %d\n", p.Session, p.Seq, p.LastConfirmed)
		},
	}
	sum, err := RunBatcher(context.Background(), os.Getenv(chaosURL), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos batcher:", err)
		os.Exit(1)
	}
	fmt.Fprintf(ledger, "%s 0 %d\n", sum.Session, sum.LastConfirmed)
	ledger.Close()
	os.Exit(0)
}

// TestChaos kills batcher processes (SIGKILL) at random moments and starts them again, and
// restarts the learner on its store twice while rollouts it was handed are unacknowledged;
// at the end no rollout the server confirmed stored is missing from those the learner
// trained (acknowledged), and none was trained twice.
func TestChaos(t *testing.T) {
	if os.Getenv(chaosURL) != "" {
		chaosBatcher()
		return
	}
	if testing.Short() {
		t.Skip("the chaos run takes about 15 s (-short)")
	}
	run := 8 * time.Second
	if s := os.Getenv(chaosSeconds); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of seconds", chaosSeconds, s)
		}
		run = time.Duration(n) * time.Second
	}
	ctx := timeout(t, run+2*time.Minute)
	dir := t.TempDir()
	model := readFile(t, policyV1)
	tasks := []Task{
		{ID: "t0", EnvID: "CartPole-v1", Seed: 100, Envs: 8, RolloutLen: 32},
		{ID: "t1", EnvID: "CartPole-v1", Seed: 200, Envs: 8, RolloutLen: 32},
		{ID: "t2", EnvID: "CartPole-v1", Seed: 300, Envs: 8, RolloutLen: 32},
	}
	ids := []string{"b0", "b1", "b2"}
	cfg := fast(ServeConfig{StoreDir: filepath.Join(dir, "nats"), Batchers: ids, AckWait: 2 * time.Second, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))})
	version := int64(0)
	start := func() (*Server, *Source) {
		t.Helper()
		s, err := Serve(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr = strings.TrimPrefix(s.URL(), "nats://") // the same address after a restart
		for _, task := range tasks {
			if err := s.AddTask(task); err != nil {
				t.Fatal(err)
			}
		}
		version++
		if err := s.PublishPolicy(ctx, version, model); err != nil {
			t.Fatal(err)
		}
		src, err := NewSource(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return s, src
	}
	s, src := start()
	url, creds := s.URL(), s.CredsDir()

	// The batcher processes, one per ID, each started again after a kill.
	var (
		pmu     sync.Mutex // guards procs, ledgers, kills
		procs   = map[string]*exec.Cmd{}
		ledgers []string
		kills   int
	)
	spawn := func(id string) {
		pmu.Lock()
		defer pmu.Unlock()
		ledger := filepath.Join(dir, fmt.Sprintf("ledger-%s-%d", id, len(ledgers)))
		cmd := exec.Command(os.Args[0], "-test.run=^TestChaos$")
		cmd.Env = append(os.Environ(), chaosURL+"="+url, chaosCreds+"="+filepath.Join(creds, id+CredsExt), chaosID+"="+id, chaosLedger+"="+ledger)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
		ledgers = append(ledgers, ledger)
	}
	for _, id := range ids {
		spawn(id)
	}
	defer func() { // whatever happens, no process is left behind
		pmu.Lock()
		defer pmu.Unlock()
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()

	// The learner: acknowledges in stacks of 4, so that up to 3 are unacknowledged when it
	// restarts.
	trained := map[rolloutKey]int{}
	handed := map[rolloutKey][]int{} // learners (restarts) that were handed it
	var earlier []SourceStats        // of the learners before a restart
	restarts := 0
	var stack []*Received
	consume := func(src *Source, until time.Time) {
		for time.Now().Before(until) {
			nctx, cancel := context.WithTimeout(ctx, time.Until(until))
			r, err := src.Next(nctx)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					return
				}
				t.Fatalf("Next: %v", err)
			}
			handed[rolloutKey{r.BatcherID, r.Session, r.Seq}] = append(handed[rolloutKey{r.BatcherID, r.Session, r.Seq}], restarts)
			stack = append(stack, r)
			if len(stack) == 4 {
				if err := src.AckAll(ctx, stack...); err != nil {
					t.Fatal(err)
				}
				for _, r := range stack {
					trained[rolloutKey{r.BatcherID, r.Session, r.Seq}]++
				}
				stack = stack[:0]
			}
		}
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	end := time.Now().Add(run)
	for time.Now().Before(end) {
		consume(src, time.Now().Add(time.Duration(300+rng.IntN(900))*time.Millisecond))
		id := ids[rng.IntN(len(ids))]
		pmu.Lock()
		p := procs[id]
		p.Process.Signal(syscall.SIGKILL)
		p.Wait()
		kills++
		pmu.Unlock()
		spawn(id)
		if restarts < 2 && time.Until(end) < run*time.Duration(2-restarts)/3 {
			// The learner stops with rollouts handed out and unacknowledged: they are
			// redelivered to the next one, which is trained once.
			stack = stack[:0]
			src.Close()
			earlier = append(earlier, src.Stats())
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, src = start()
			restarts++
		}
	}

	// The end: the batchers exit 0; the learner drains the stream.
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	pmu.Lock()
	for id, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("batcher %s: %v", id, err)
		}
	}
	procs = map[string]*exec.Cmd{}
	pmu.Unlock()
	for {
		consume(src, time.Now().Add(time.Second))
		if len(stack) > 0 {
			if err := src.AckAll(ctx, stack...); err != nil {
				t.Fatal(err)
			}
			for _, r := range stack {
				trained[rolloutKey{r.BatcherID, r.Session, r.Seq}]++
			}
			stack = stack[:0]
		}
		if streamMsgs(t, s) == 0 {
			break
		}
	}
	st := src.Stats()
	src.Close()
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	for _, e := range earlier {
		st.Duplicates += e.Duplicates
		st.DuplicateChunks += e.DuplicateChunks
		st.Incomplete += e.Incomplete
		st.Corrupt += e.Corrupt
		st.Malformed += e.Malformed
	}

	// The accounting.
	twice, confirmed, lost := 0, 0, 0
	for key, n := range trained {
		if n > 1 {
			twice++
			t.Errorf("rollout %v trained %d times", key, n)
		}
	}
	for _, ledger := range ledgers {
		id := strings.Split(filepath.Base(ledger), "-")[1]
		session, published, last := readLedger(t, ledger)
		for _, seq := range published {
			if seq > last {
				continue // not confirmed stored: it may be lost with its batcher
			}
			confirmed++
			if trained[rolloutKey{id, session, seq}] == 0 {
				lost++
				if lost <= 10 {
					t.Errorf("rollout %s/%x/%d was confirmed stored and never trained (handed to learners %v)",
						id, session, seq, handed[rolloutKey{id, session, seq}])
				}
			}
		}
	}
	t.Logf("%v: %d batcher processes killed, %d learner restarts; %d rollouts confirmed stored, %d trained, %d lost, %d trained twice; "+
		"the learners dropped %d duplicate rollouts (%d chunks), %d incomplete, %d corrupt chunks, %d malformed; per batcher %v",
		run, kills, restarts, confirmed, len(trained), lost, twice, st.Duplicates, st.DuplicateChunks, st.Incomplete, st.Corrupt, st.Malformed, st.PerBatcher)
	if kills == 0 || restarts != 2 || confirmed == 0 {
		t.Errorf("the run did too little to test anything")
	}
}

// readLedger returns the session of a chaos batcher's ledger, the rollouts it published
// and the newest one confirmed stored; a line cut by the kill is ignored.
func readLedger(t *testing.T, name string) (session uint64, published []uint64, last uint64) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil, 0 // killed before its first rollout
	}
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if !strings.HasSuffix(line, "\n") {
			continue // cut
		}
		var s, seq, l uint64
		if n, _ := fmt.Sscanf(line, "%x %d %d\n", &s, &seq, &l); n != 3 || session != 0 && s != session {
			t.Fatalf("ledger %s: line %q", name, line)
		}
		session, last = s, max(last, l)
		if seq > 0 {
			published = append(published, seq)
		}
	}
	return session, published, last
}
