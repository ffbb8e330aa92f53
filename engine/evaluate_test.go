package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/gif"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/engine/rundir"
	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/render"
	"github.com/towerrl/towerrl/internal/tfevent/tfeventtest"
)

// evalRun evaluates every 3 of its 12 iterations, checkpoints every 5.
func evalRun() Config {
	return Config{Env: "CartPole-v1", TotalSteps: 512 * 12, CheckpointEvery: 5, Seed: 5, EvalEpisodes: 3, EvalEvery: 3}
}

// readBest reads dir's best.json.
func readBest(t *testing.T, dir string) BestPolicy {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, rundir.BestFile))
	if err != nil {
		t.Fatal(err)
	}
	var b BestPolicy
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// scoreFile evaluates the policy file at path as eval does (bind.New over the file's bytes, a
// fresh batcher.Evaluate), with the run's evaluation seed and episodes.
func scoreFile(t *testing.T, path string, cfg Config) batcher.EvalResult {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := envs.Lookup(cfg.Env)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pol, err := bind.New(ctx, data, 0, spec, bind.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := batcher.Evaluate(ctx, batcher.EvalConfig{Env: spec, Episodes: cfg.EvalEpisodes, Seed: cfg.Seed + 1_000_003, Deterministic: true}, pol)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestEvalDuringTraining trains CartPole with an evaluation every 3 iterations and checks:
// the evaluations are in metrics.jsonl after iterations 3, 6, 9 and 12 only, each marked best
// when it beats every earlier one (ties to the earlier); best.json names the best of them, and
// best_policy.onnx, bound and evaluated afresh as eval does, scores what the record says; the
// last evaluation, of the final policy on the same episodes, equals the final evaluation; the
// TensorBoard files hold eval/episodic_return at those steps. Then a run killed after
// iteration 4 (its last checkpoint at 0, its best record at 3, past it) and resumed writes the
// uninterrupted run's metrics lines, policy.onnx, best.json and best_policy.onnx.
func TestEvalDuringTraining(t *testing.T) {
	ctx := context.Background()
	cfg := evalRun()
	full := filepath.Join(t.TempDir(), "full")
	res, err := Train(ctx, cfg, Options{Out: full})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, full)
	var bestIt int
	bestRet := math.Inf(-1)
	var evals []float64
	for _, m := range ms {
		if m.Iteration%3 != 0 {
			if m.Eval != nil {
				t.Errorf("iteration %d: an evaluation, want one every 3 iterations", m.Iteration)
			}
			continue
		}
		e := m.Eval
		if e == nil {
			t.Fatalf("iteration %d: no evaluation", m.Iteration)
		}
		if e.Episodes != 3 || !(e.ReturnMean >= 8) || e.ReturnStd < 0 || !(e.LengthMean == e.ReturnMean) {
			t.Errorf("iteration %d: evaluation %+v (CartPole: return = length)", m.Iteration, *e)
		}
		better := float64(e.ReturnMean) > bestRet
		if e.Best != better {
			t.Errorf("iteration %d: best %v, want %v (mean %v, best before %v)", m.Iteration, e.Best, better, e.ReturnMean, bestRet)
		}
		if better {
			bestIt, bestRet = m.Iteration, float64(e.ReturnMean)
		}
		evals = append(evals, float64(e.ReturnMean))
	}
	t.Logf("evaluations %v; best after iteration %d", evals, bestIt)
	b := readBest(t, full)
	want := BestPolicy{Path: rundir.BestPolicyFile, Iteration: bestIt, EnvSteps: int64(512 * bestIt), ReturnMean: bestRet,
		ReturnStd: b.ReturnStd, Episodes: 3, Seed: cfg.Seed + 1_000_003, SHA256: b.SHA256}
	if b != want {
		t.Errorf("best.json %+v, want %+v", b, want)
	}
	policy, err := os.ReadFile(filepath.Join(full, rundir.BestPolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	if rundir.SHA256Hex(policy) != b.SHA256 {
		t.Error("best_policy.onnx is not the file best.json describes")
	}
	want.Path = filepath.Join(full, rundir.BestPolicyFile)
	if res.Best == nil || *res.Best != want {
		t.Errorf("Result.Best %+v, want %+v", res.Best, want)
	}
	if ev := scoreFile(t, want.Path, cfg); ev.ReturnMean != bestRet || ev.ReturnStd != b.ReturnStd {
		t.Errorf("best_policy.onnx scores %v ± %v afresh, best.json says %v ± %v", ev.ReturnMean, ev.ReturnStd, bestRet, b.ReturnStd)
	}
	if last := ms[len(ms)-1].Eval; res.EvalReturnMean != float64(last.ReturnMean) || res.EvalReturnStd != float64(last.ReturnStd) {
		t.Errorf("final evaluation %v ± %v, the evaluation after the last iteration %v ± %v (same policy, same episodes)",
			res.EvalReturnMean, res.EvalReturnStd, last.ReturnMean, last.ReturnStd)
	}
	evs, err := tfeventtest.ReadDir(full)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := tfeventtest.Scalars(evs)
	if err != nil {
		t.Fatal(err)
	}
	if pts := sc["eval/episodic_return"]; len(pts) != 4 || pts[0].Step != 1536 || pts[3].Step != 6144 || pts[3].Value != float32(evals[3]) {
		t.Errorf("eval/episodic_return %v, want 4 points at steps 1536…6144 with the evaluations' means %v", pts, evals)
	}
	if n := len(sc["eval/episodic_return_std"]); n != 4 {
		t.Errorf("%d values of eval/episodic_return_std, want 4", n)
	}

	cut := filepath.Join(t.TempDir(), "cut")
	trainKilled(t, cfg, Options{Out: cut}, 4)
	if b := readBest(t, cut); b.Iteration != 3 {
		t.Fatalf("the killed run's best.json is of iteration %d, want 3", b.Iteration)
	}
	if _, err := Resume(ctx, cut, Options{}); err != nil {
		t.Fatal(err)
	}
	sameRun(t, full, cut, 12)
	sameFile(t, full, cut, rundir.BestFile)
	sameFile(t, full, cut, rundir.BestPolicyFile)
}

// sameFile checks that name holds the same bytes in runs a and b.
func sameFile(t *testing.T, a, b, name string) {
	t.Helper()
	x, err := os.ReadFile(filepath.Join(a, name))
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(filepath.Join(b, name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s differs between the runs:\n%s\n%s", name, x, y)
	}
}

// TestStopAtReturn stops a run at the first evaluation that reaches the mean return of the
// uninterrupted run's evaluation after iteration 6: it ends without error after that
// iteration, saying why, with its checkpoint and a policy.onnx that is best_policy.onnx (the
// first to reach the return is the best so far). A resume with the same StopAtReturn trains
// nothing (the run is complete); one with StopAtReturn unset trains on to the end and finishes
// as the uninterrupted run did, bit for bit.
func TestStopAtReturn(t *testing.T) {
	ctx := context.Background()
	cfg := evalRun()
	full := filepath.Join(t.TempDir(), "full")
	fullRes, err := Train(ctx, cfg, Options{Out: full})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, full)
	r := float64(ms[5].Eval.ReturnMean)
	stopAt := 0
	for _, m := range ms {
		if m.Eval != nil && float64(m.Eval.ReturnMean) >= r {
			stopAt = m.Iteration
			break
		}
	}
	cfg.StopAtReturn = &r
	dir := filepath.Join(t.TempDir(), "stop")
	res, err := Train(ctx, cfg, Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Iterations != stopAt || res.EnvSteps != int64(512*stopAt) || !strings.Contains(res.StoppedEarly, "stop_at_return") {
		t.Fatalf("stopped after %d iterations (%d steps), %q; want after iteration %d, saying why", res.Iterations, res.EnvSteps, res.StoppedEarly, stopAt)
	}
	if n := len(readMetrics(t, dir)); n != stopAt {
		t.Errorf("%d metrics lines, want %d", n, stopAt)
	}
	p, _ := os.ReadFile(filepath.Join(dir, policyFile))
	bp, _ := os.ReadFile(filepath.Join(dir, rundir.BestPolicyFile))
	if !bytes.Equal(p, bp) || len(p) == 0 {
		t.Error("policy.onnx is not best_policy.onnx")
	}
	again, err := Resume(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Complete || again.Iterations != stopAt || again.ParamsSHA256 != res.ParamsSHA256 || !strings.Contains(again.StoppedEarly, "had stopped early") {
		t.Errorf("resumed with the same stop_at_return: %+v; want a complete run, nothing trained", again)
	}
	on, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.StopAtReturn = nil }})
	if err != nil {
		t.Fatal(err)
	}
	if on.Iterations != 12 || on.ParamsSHA256 != fullRes.ParamsSHA256 || on.StoppedEarly != "" {
		t.Errorf("resumed without stop_at_return: %d iterations, parameters %s, %q; want the uninterrupted run's 12, %s",
			on.Iterations, on.ParamsSHA256, on.StoppedEarly, fullRes.ParamsSHA256)
	}
	sameRun(t, full, dir, 12)
}

// TestEvalConfig: the evaluation fields are checked, naming the field and what to give.
func TestEvalConfig(t *testing.T) {
	r, nan := 100.0, math.NaN()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Env: "CartPole-v1", EvalEvery: -1}, "EvalEvery = -1"},
		{Config{Env: "CartPole-v1", EvalEvery: 5, EvalEpisodes: -1}, "give EvalEpisodes"},
		{Config{Env: "CartPole-v1", StopAtReturn: &r}, "set EvalEvery too"},
		{Config{Env: "CartPole-v1", EvalEvery: 5, StopAtReturn: &nan}, "want a finite return"},
	} {
		_, err := tc.cfg.WithDefaults()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an ErrConfig saying %q", tc.cfg, err, tc.want)
		}
	}
	c, err := ParseConfig([]byte(`{"env": "CartPole-v1", "eval_every": 10, "stop_at_return": -150.5}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = c.WithDefaults(); err != nil || c.EvalEvery != 10 || c.StopAtReturn == nil || *c.StopAtReturn != -150.5 || c.EvalEpisodes != 10 {
		t.Errorf("parsed %+v, %v", c, err)
	}
}

// TestEvalDDPPO: in a DD-PPO job on two ranks, rank 0 evaluates and writes the best policy,
// and a StopAtReturn it reaches (any return, here) stops both ranks after the same iteration,
// without error.
func TestEvalDDPPO(t *testing.T) {
	low := -1.0 // CartPole's returns are positive: the first evaluation reaches it
	cfg := Config{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * 512 * 6, CheckpointEvery: 4, Seed: 3, EvalEpisodes: 2,
		EvalEvery: 2, StopAtReturn: &low}
	dir := filepath.Join(t.TempDir(), "ddppo")
	res, errs := trainRanks(t, 2, cfg, dir, false, nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, x := range res {
		if x.Iterations != 2 || x.StoppedEarly == "" {
			t.Errorf("rank %d: %d iterations, %q; want a stop after iteration 2", r, x.Iterations, x.StoppedEarly)
		}
	}
	if res[0].Best == nil || res[0].Best.EnvSteps != 2*512*2 || res[1].Best != nil {
		t.Errorf("best: rank 0 %+v, rank 1 %+v; want rank 0's, at step 2048", res[0].Best, res[1].Best)
	}
	if b := readBest(t, dir); b.Iteration != 2 {
		t.Errorf("best.json %+v", b)
	}
	res, errs = trainRanks(t, 2, cfg, dir, true, nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r, x := range res {
		if !x.Complete || x.Iterations != 2 {
			t.Errorf("rank %d resumed: complete %v after %d iterations; want the stopped run complete, nothing trained", r, x.Complete, x.Iterations)
		}
	}
}

// TestGifEvery draws an episode every 2 of 4 CartPole iterations: gifs/step-<env steps>.gif
// after iterations 2 and 4, named in their metrics lines, that image/gif decodes to
// Gymnasium's 600×400 frames, one per step and the first observation, with the length of the
// first episode the evaluation envs run with that policy (an evaluation after the same
// iterations: its first return, CartPole's length); and the same bytes in TensorBoard as the
// image "episode" at those steps (RGB, the frame's size). An env with no drawing is refused.
func TestGifEvery(t *testing.T) {
	cfg := Config{Env: "CartPole-v1", TotalSteps: 512 * 4, Seed: 9, EvalEpisodes: 1, EvalEvery: 2, GifEvery: 2}
	dir := filepath.Join(t.TempDir(), "gif")
	if _, err := Train(context.Background(), cfg, Options{Out: dir, Draw: testDrawer}); err != nil {
		t.Fatal(err)
	}
	evs, err := tfeventtest.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	images := map[int64][]byte{}
	for _, e := range evs {
		for _, v := range e.Values {
			if v.HasImage {
				if v.Tag != "episode" || v.Width != 600 || v.Height != 400 || v.Colorspace != 3 {
					t.Errorf("image %q of %d×%d, colorspace %d at step %d", v.Tag, v.Width, v.Height, v.Colorspace, e.Step)
				}
				images[e.Step] = v.Encoded
			}
		}
	}
	for _, m := range readMetrics(t, dir) {
		want := ""
		if m.Iteration%2 == 0 {
			want = filepath.Join("gifs", fmt.Sprintf("step-%09d.gif", m.EnvSteps))
		}
		if m.GIF != want {
			t.Errorf("iteration %d: gif %q, want %q", m.Iteration, m.GIF, want)
		}
		if want == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, want))
		if err != nil {
			t.Fatal(err)
		}
		g, err := gif.DecodeAll(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		length := int(m.Eval.ReturnMean) // CartPole: one reward a step
		if len(g.Image) != length+1 || g.Config.Width != 600 || g.Config.Height != 400 {
			t.Errorf("%s: %d frames of %d×%d, want %d of 600×400 (an episode of %d steps)", want, len(g.Image), g.Config.Width,
				g.Config.Height, length+1, length)
		}
		if !bytes.Equal(images[m.EnvSteps], data) {
			t.Errorf("TensorBoard's image at step %d is not %s", m.EnvSteps, want)
		}
	}
	if len(images) != 2 {
		t.Errorf("%d images in TensorBoard, want 2", len(images))
	}
	refused := filepath.Join(t.TempDir(), "refused")
	_, err = Train(context.Background(), Config{Env: reach2x3, GifEvery: 1}, Options{Out: refused, Draw: testDrawer})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "GifEvery") || !strings.Contains(err.Error(), "CartPole-v1") {
		t.Errorf("GifEvery on %s: %v, want an ErrConfig naming the field and the envs drawn", reach2x3, err)
	}
	_, err = Train(context.Background(), cfg, Options{Out: refused})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Options.Draw") {
		t.Errorf("GifEvery without Options.Draw: %v, want an ErrConfig naming Options.Draw", err)
	}
	if _, err := os.Stat(refused); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused run left %s behind (%v)", refused, err)
	}
}

// testDrawer is package engine/gif's Drawer, which this package's tests cannot import (it
// imports engine): envs/render's drawing of the env's episodes.
func testDrawer(env string) (Drawer, error) {
	scene, err := render.For(env)
	if err != nil {
		return Drawer{}, err
	}
	return Drawer{Width: scene.Width, Height: scene.Height, Draw: func(w io.Writer, tr batcher.Trajectory) error {
		_, err := render.WriteEpisode(w, scene, render.Episode{ObsDim: tr.ObsDim, ActDim: tr.ActDim, Obs: tr.Obs,
			Actions: tr.Actions, Rewards: tr.Rewards})
		return err
	}}, nil
}

// TestEvalOffPolicy: the off-policy loop evaluates every EvalEvery env steps, after the
// iterations (200 steps each here) that cross each multiple of 1000 — 5, 10, 15, 20 — keeping
// best.json; a StopAtReturn every evaluation reaches stops it after iteration 5, a resume with
// the same return is complete, and one without it trains on to the uninterrupted run's
// parameters, bit for bit.
func TestEvalOffPolicy(t *testing.T) {
	ctx := context.Background()
	cfg := killRuns["dqn"]
	cfg.EvalEvery, cfg.EvalEpisodes = 1000, 2
	full := filepath.Join(t.TempDir(), "full")
	fullRes, err := Train(ctx, cfg, Options{Out: full})
	if err != nil {
		t.Fatal(err)
	}
	var evaluated []int
	for _, m := range readMetrics(t, full) {
		if m.Eval != nil {
			evaluated = append(evaluated, m.Iteration)
		}
	}
	if !slices.Equal(evaluated, []int{5, 10, 15, 20}) {
		t.Errorf("evaluations after iterations %v, want 5, 10, 15, 20", evaluated)
	}
	if b := readBest(t, full); fullRes.Best == nil || b.EnvSteps != fullRes.Best.EnvSteps || b.EnvSteps%1000 != 0 {
		t.Errorf("best.json %+v, Result.Best %+v", b, fullRes.Best)
	}
	low := -1.0
	cfg.StopAtReturn = &low
	dir := filepath.Join(t.TempDir(), "stop")
	res, err := Train(ctx, cfg, Options{Out: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Iterations != 5 || res.EnvSteps != 1000 || res.StoppedEarly == "" {
		t.Fatalf("stopped after %d iterations, %d steps, %q; want 5, 1000, saying why", res.Iterations, res.EnvSteps, res.StoppedEarly)
	}
	if again, err := Resume(ctx, dir, Options{}); err != nil || !again.Complete || again.Iterations != 5 {
		t.Fatalf("resumed with the same stop_at_return: %+v, %v; want complete", again, err)
	}
	on, err := Resume(ctx, dir, Options{Change: func(c *Config) { c.StopAtReturn = nil }})
	if err != nil {
		t.Fatal(err)
	}
	if on.Iterations != 24 || on.ParamsSHA256 != fullRes.ParamsSHA256 {
		t.Errorf("resumed without stop_at_return: %d iterations, %s; want 24, %s", on.Iterations, on.ParamsSHA256, fullRes.ParamsSHA256)
	}
}
