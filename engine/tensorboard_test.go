package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/towerrl/towerrl/internal/tfevent"
	"github.com/towerrl/towerrl/internal/tfevent/tfeventtest"
)

// readMetrics reads a run's metrics.jsonl.
func readMetrics(t *testing.T, dir string) []Metrics {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, metricsFile))
	if err != nil {
		t.Fatal(err)
	}
	var ms []Metrics
	for line := range bytes.Lines(data) {
		var m Metrics
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// checkEvents decodes dir's event files with the independent decoder (every record's CRCs
// checked) and checks them against its metrics.jsonl: each of CleanRL's tags once per
// iteration at its env steps, with the line's value (as float32), and the hyperparameters
// text once. It returns the scalars by tag.
func checkEvents(t *testing.T, dir string) map[string][]tfeventtest.Point {
	t.Helper()
	evs, err := tfeventtest.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range evs {
		for _, v := range e.Values {
			if v.Tag == "hyperparameters" {
				if v.Plugin != "text" || len(v.StringVal) != 1 || e.Step != 0 {
					t.Errorf("hyperparameters value %+v at step %d", v, e.Step)
				}
				texts = append(texts, v.StringVal...)
			}
		}
	}
	if len(texts) != 1 || !strings.HasPrefix(texts[0], "|param|value|\n|-|-|\n|env|\"CartPole-v1\"|\n") ||
		!strings.Contains(texts[0], "\n|rollout_steps|128|") {
		t.Errorf("hyperparameters texts %q", texts)
	}
	got, err := tfeventtest.Scalars(evs)
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, dir)
	var prevSteps int64
	var prevWall float64
	for tag, value := range map[string]func(m Metrics) Float{
		"charts/episodic_return":    func(m Metrics) Float { return m.ReturnMean },
		"charts/episodic_length":    func(m Metrics) Float { return m.LengthMean },
		"charts/learning_rate":      func(m Metrics) Float { return m.LR },
		"losses/value_loss":         func(m Metrics) Float { return m.ValueLoss },
		"losses/policy_loss":        func(m Metrics) Float { return m.PolicyLoss },
		"losses/entropy":            func(m Metrics) Float { return m.Entropy },
		"losses/approx_kl":          func(m Metrics) Float { return m.ApproxKL },
		"losses/old_approx_kl":      func(m Metrics) Float { return m.OldApproxKL },
		"losses/clipfrac":           func(m Metrics) Float { return m.ClipFrac },
		"losses/explained_variance": func(m Metrics) Float { return m.ExplainedVar },
		"charts/SPS": func(m Metrics) Float { // over the iteration (a resumed process starts its clock at 0)
			if m.WallSeconds < Float(prevWall) {
				prevWall = 0
			}
			sps := float64(m.EnvSteps-prevSteps) / (float64(m.WallSeconds) - prevWall)
			prevSteps, prevWall = m.EnvSteps, float64(m.WallSeconds)
			return Float(sps)
		},
	} {
		prevSteps, prevWall = 0, 0
		var want []tfeventtest.Point
		for _, m := range ms {
			if v := value(m); !math.IsNaN(float64(v)) {
				want = append(want, tfeventtest.Point{Step: m.EnvSteps, Value: float32(v)})
			}
		}
		if len(want) == 0 {
			t.Errorf("%s: no iteration has a value", tag)
		}
		pts := got[tag]
		if len(pts) != len(want) {
			t.Errorf("%s: %d values, want %d (one per iteration with one)", tag, len(pts), len(want))
			continue
		}
		for i := range want {
			// SPS is checked for its step alone when the resumed process's clock is involved.
			if pts[i].Step != want[i].Step || (pts[i].Value != want[i].Value && tag != "charts/SPS") {
				t.Errorf("%s value %d: %+v, want %+v", tag, i, pts[i], want[i])
			}
		}
	}
	return got
}

// TestTensorBoard trains CartPole and reads its event files back; kills a run of the same
// config after iteration 6 (last checkpoint at 4), tears the last record of its event file as
// a kill while writing would, resumes it, and checks that the files hold each step once with
// the uninterrupted run's losses; that appo's own figures and a DD-PPO job's (from rank 0
// alone) are there; and that Options.NoTensorBoard writes none.
func TestTensorBoard(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Env: "CartPole-v1", TotalSteps: 512 * 8, CheckpointEvery: 4, Seed: 7, EvalEpisodes: -1}
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, cfg, Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	files, err := tfevent.Files(full)
	if err != nil || len(files) != 1 {
		t.Fatalf("event files %v, %v; want 1", files, err)
	}
	want := checkEvents(t, full)
	if n := len(want["losses/value_loss"]); n != 8 {
		t.Fatalf("%d value losses, want 8", n)
	}

	cut := filepath.Join(t.TempDir(), "cut")
	trainKilled(t, cfg, Options{Out: cut}, 6)
	files, _ = tfevent.Files(cut)
	if len(files) != 1 {
		t.Fatalf("the killed run left %d event files", len(files))
	}
	f, err := os.OpenFile(files[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := tfevent.AppendRecord(nil, bytes.Repeat([]byte{0x10}, 40))
	f.Write(rec[:30]) // a torn record
	f.Close()
	if _, err := Resume(ctx, cut, Options{}); err != nil {
		t.Fatal(err)
	}
	if files, _ = tfevent.Files(cut); len(files) != 2 {
		t.Fatalf("the resumed run has %d event files, want 2 (the first cut back to iteration 4)", len(files))
	}
	// The killed run wrote 6 iterations; its last checkpoint on disk is at iteration 4, or at
	// 0 when the kill came before the (asynchronous) write of iteration 4's finished. The
	// first file keeps the iterations up to it, the second holds the rest.
	var steps [2][]int64
	for i := range files {
		evs, err := tfeventtest.ReadFile(files[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs[1:] { // after the file_version event
			if len(e.Values) > 0 && e.Values[0].Tag != "hyperparameters" {
				steps[i] = append(steps[i], e.Step)
			}
		}
	}
	k := len(steps[0])
	t.Logf("resumed from iteration %d", k)
	if k != 0 && k != 4 || !slices.Equal(append(steps[0], steps[1]...), []int64{512, 1024, 1536, 2048, 2560, 3072, 3584, 4096}) {
		t.Errorf("the event files hold steps %v and %v, want iterations 1–4 (or none) and the rest", steps[0], steps[1])
	}
	got := checkEvents(t, cut)
	for _, tag := range []string{"losses/value_loss", "losses/policy_loss", "losses/approx_kl", "charts/episodic_return", "charts/learning_rate"} {
		if a, b := want[tag], got[tag]; len(a) != len(b) || !equalPoints(a, b) {
			t.Errorf("%s: resumed run %v, uninterrupted %v", tag, b, a)
		}
	}

	// The algorithms' own statistics: ppo's total loss; appo's V-trace figures and its async
	// ones, one value per iteration.
	if n := len(want["losses/loss"]); n != 8 {
		t.Errorf("%d values of losses/loss, want 8", n)
	}
	appo := filepath.Join(t.TempDir(), "appo")
	if _, err := Train(ctx, Config{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 3, Seed: 7, EvalEpisodes: -1}, Options{Out: appo}); err != nil {
		t.Fatal(err)
	}
	evs, err := tfeventtest.ReadDir(appo)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := tfeventtest.Scalars(evs)
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, appo)
	for _, tag := range []string{"losses/rho_mean", "losses/rho_clip_frac", "losses/clipfrac", "async/policy_lag_mean", "async/learner_idle"} {
		if len(sc[tag]) != len(ms) {
			t.Errorf("appo: %d values of %s for %d iterations", len(sc[tag]), tag, len(ms))
		}
	}
	if got, want := sc["losses/rho_mean"][0].Value, float32(ms[0].Stats["rho_mean"]); got != want {
		t.Errorf("appo: losses/rho_mean %v, metrics.jsonl %v", got, want)
	}

	// DD-PPO: rank 0 alone writes, with the job's steps (two ranks × 512 an iteration).
	dd := filepath.Join(t.TempDir(), "ddppo")
	_, errs := trainRanks(t, 2, Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * 512 * 3, Seed: 7, EvalEpisodes: -1}, dd, false, nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if files, _ := tfevent.Files(dd); len(files) != 1 {
		t.Errorf("DD-PPO on 2 ranks wrote %d event files, want 1", len(files))
	}
	if pts := checkEvents(t, dd)["losses/value_loss"]; len(pts) != 3 || pts[0].Step != 1024 || pts[2].Step != 3072 {
		t.Errorf("DD-PPO value losses at %v, want steps 1024, 2048, 3072", pts)
	}

	off := filepath.Join(t.TempDir(), "off")
	cfg.TotalSteps = 512
	if _, err := Train(ctx, cfg, Options{Out: off, NoTensorBoard: true}); err != nil {
		t.Fatal(err)
	}
	if files, _ := tfevent.Files(off); len(files) != 0 {
		t.Errorf("NoTensorBoard wrote %v", files)
	}

	// A resume with NoTensorBoard writes no file but still cuts the others back to its
	// checkpoint: a killed run's iterations 5 and 6 go.
	quiet := filepath.Join(t.TempDir(), "quiet")
	cfg.TotalSteps = 512 * 8
	trainKilled(t, cfg, Options{Out: quiet}, 6)
	if _, err := Resume(ctx, quiet, Options{NoTensorBoard: true}); err != nil {
		t.Fatal(err)
	}
	files, _ = tfevent.Files(quiet)
	evs, err = tfeventtest.ReadDir(quiet)
	if err != nil || len(files) != 1 {
		t.Fatalf("%d event files, %v; want the first run's alone", len(files), err)
	}
	last := evs[len(evs)-1].Step
	if k := len(readMetrics(t, quiet)); k != 8 || (last != 0 && last != 2048) {
		t.Errorf("after a resume with NoTensorBoard the event file ends at step %d, want the checkpoint's (0 or 2048)", last)
	}
}

func equalPoints(a, b []tfeventtest.Point) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// BenchmarkTensorBoardWrite is the cost of one iteration's event (every tag of a PPO
// iteration, one record, one write to the file): `make demo` writes 976 of them.
func BenchmarkTensorBoardWrite(b *testing.B) {
	w, err := tfevent.Create(b.TempDir(), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	tb := &tensorBoard{}
	var buf []tfevent.Scalar
	m := Metrics{Iteration: 1, EnvSteps: 512, Episodes: 20, ReturnMean: 22.5, ReturnMin: 9, ReturnMax: 61, LengthMean: 22.5,
		PolicyLoss: -0.002, ValueLoss: 41.5, Entropy: 0.69, ApproxKL: 1.6e-4, ClipFrac: 0.01, ExplainedVar: 0.02, LR: 2.5e-4,
		CollectSPS: 90000, LearnSPS: 200000, Version: 1, WallSeconds: 0.05, CollectSeconds: 0.01, LearnSeconds: 0.03}
	for b.Loop() {
		m.EnvSteps += 512
		m.WallSeconds += 0.05
		step, vs := tb.figures(m) // as rundir's TensorBoard log writes them
		buf = buf[:0]
		for _, v := range vs {
			buf = append(buf, tfevent.Scalar{Tag: v.Tag, Value: v.Value})
		}
		if err := w.Scalars(time.Now(), step, buf); err != nil {
			b.Fatal(err)
		}
	}
}
