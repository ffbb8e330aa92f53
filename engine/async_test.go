package engine

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/towerrl/towerrl/engine/algo"
)

// slowed is an asynchronous algorithm whose targets take a fixed time: a learner slowed down
// for the backpressure test.
type slowed struct {
	algo.Algorithm
	d time.Duration
}

func (s slowed) Name() string    { return "slowed-appo" }
func (s slowed) Sequences() bool { return true }
func (s slowed) Targets(r algo.Rollout, adv, ret []float32) error {
	time.Sleep(s.d)
	return s.Algorithm.Targets(r, adv, ret)
}

func init() {
	algo.Register("slowed-appo", func(s algo.Settings) (algo.Algorithm, error) {
		a, err := algo.New("appo", s)
		return slowed{a, 20 * time.Millisecond}, err
	}, algo.Capabilities{})
}

// TestAsyncBackpressure slows the learner 20 ms per rollout (about 10× its own time): the
// batchers block on the full ring and say so, memory stays flat (the Go heap in use and the
// process's resident set, which holds ONNX Runtime's native buffers too), and the run still
// completes.
func TestAsyncBackpressure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var ms []Metrics
	var heap, rss []uint64
	_, err := Train(context.Background(), Config{Env: "CartPole-v1", Algo: "slowed-appo", TotalSteps: 512 * 60, Seed: 2, EvalEpisodes: -1},
		Options{Progress: func(m Metrics) {
			ms = append(ms, m)
			var st runtime.MemStats
			runtime.ReadMemStats(&st)
			heap = append(heap, st.HeapInuse)
			rss = append(rss, residentBytes(t))
		}})
	if err != nil {
		t.Fatal(err)
	}
	idle := 0.0
	for _, m := range ms[10:] {
		idle += float64(m.Async.BatcherIdle)
	}
	idle /= float64(len(ms) - 10)
	if idle < 0.5 {
		t.Errorf("with the learner slowed the batchers were idle %.0f%% of the time, want most of it", 100*idle)
	}
	first, last := heap[10], heap[len(heap)-1]
	if grow := float64(last) - float64(first); grow > math.Max(8<<20, 0.5*float64(first)) {
		t.Errorf("heap in use grew from %d to %d bytes over %d iterations", first, last, len(heap)-10)
	}
	r0, r1 := rss[10], rss[len(rss)-1]
	if grow := float64(r1) - float64(r0); grow > math.Max(16<<20, 0.25*float64(r0)) {
		t.Errorf("resident set grew from %d to %d bytes over %d iterations", r0, r1, len(rss)-10)
	}
	t.Logf("batchers idle %.0f%%, heap in use %d → %d bytes, resident set %d → %d bytes", 100*idle, first, last, r0, r1)
}

// residentBytes is the process's resident set size, from /proc/self/statm (its second field,
// in pages).
func residentBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatalf("reading the resident set size: %v (the test needs Linux's /proc)", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		t.Fatalf("/proc/self/statm reads %q: want at least two fields", b)
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("/proc/self/statm's resident field %q: %v", f[1], err)
	}
	return pages * uint64(os.Getpagesize())
}

// TestAsyncResume stops an APPO run after a few iterations and resumes it to the end: the
// checkpoint holds the learner's state, the resumed batchers start fresh episodes.
func TestAsyncResume(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := filepath.Join(t.TempDir(), "run")
	cfg := Config{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 12, CheckpointEvery: 4, Seed: 3, EvalEpisodes: -1}
	if err := trainStopped(cfg, Options{Out: dir}, 6); !errors.Is(err, ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	res, err := Resume(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.EnvSteps != 512*12 || len(metricsWithoutTimings(t, dir)) != 12 {
		t.Fatalf("resumed: %+v, %d metrics lines", res, len(metricsWithoutTimings(t, dir)))
	}
}
