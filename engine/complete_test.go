package engine

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestResumeFinishedRun: resuming a run that has trained all its iterations trains nothing,
// says the run was complete, leaves policy.onnx as it was and evaluates the trained policy —
// the score the run itself reported — not the untrained export the trainer starts from (the
// defect: 484 at the end of training, 9.3 on resume). For ppo, appo and DD-PPO on two ranks.
func TestResumeFinishedRun(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []Config{
		{Env: "CartPole-v1", TotalSteps: 512 * 6, CheckpointEvery: 2, Seed: 3, EvalEpisodes: 4},
		{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 6, CheckpointEvery: 2, Seed: 3, EvalEpisodes: 4},
		{Env: "CartPole-v1", Algo: "ddppo", TotalSteps: 2 * 512 * 3, CheckpointEvery: 2, Seed: 3, EvalEpisodes: 4},
	} {
		t.Run(map[string]string{"": "ppo"}[cfg.Algo]+cfg.Algo, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			var first, again Result
			if cfg.Algo == "ddppo" {
				res, errs := trainRanks(t, 2, cfg, dir, false, nil)
				if errs[0] != nil || errs[1] != nil {
					t.Fatal(errs)
				}
				first = res[0]
			} else {
				var err error
				if first, err = Train(ctx, cfg, Options{Out: dir}); err != nil {
					t.Fatal(err)
				}
			}
			policy := readFile(t, filepath.Join(dir, policyFile))
			metrics := readFile(t, filepath.Join(dir, metricsFile))
			if cfg.Algo == "ddppo" {
				res, errs := trainRanks(t, 2, Config{}, dir, true, nil)
				if errs[0] != nil || errs[1] != nil {
					t.Fatal(errs)
				}
				again = res[0]
			} else {
				var err error
				if again, err = Resume(ctx, dir, Options{}); err != nil {
					t.Fatal(err)
				}
			}
			if !again.Complete || first.Complete {
				t.Errorf("complete: %v on the resume, %v on the run; want true, false", again.Complete, first.Complete)
			}
			if again.EvalReturnMean != first.EvalReturnMean || again.EvalEpisodes != first.EvalEpisodes {
				t.Errorf("the resumed finished run evaluates to %v over %d episodes, the run itself to %v over %d",
					again.EvalReturnMean, again.EvalEpisodes, first.EvalReturnMean, first.EvalEpisodes)
			}
			if again.ParamsSHA256 != first.ParamsSHA256 || again.EnvSteps != first.EnvSteps || again.Iterations != first.Iterations {
				t.Errorf("resumed %+v\nrun     %+v", again, first)
			}
			if !bytes.Equal(readFile(t, filepath.Join(dir, policyFile)), policy) {
				t.Error("resuming the finished run changed policy.onnx")
			}
			if !bytes.Equal(readFile(t, filepath.Join(dir, metricsFile)), metrics) {
				t.Error("resuming the finished run changed metrics.jsonl")
			}
		})
	}
}

// TestResumeRepairsPolicy: a process killed after the final checkpoint was written but
// before policy.onnx was (the defect's strace delay on the rename, then SIGKILL) left the
// checkpoint of the last iteration beside an older policy.onnx; resuming the finished run
// writes the checkpoint's policy, byte for byte the uninterrupted run's.
func TestResumeRepairsPolicy(t *testing.T) {
	ctx := context.Background()
	cfg := smallRun(7)
	full := filepath.Join(t.TempDir(), "full")
	if _, err := Train(ctx, cfg, Options{Out: full}); err != nil {
		t.Fatal(err)
	}
	want := readFile(t, filepath.Join(full, policyFile))
	// Iteration 4's policy.onnx: the same run stopped there.
	dir := filepath.Join(t.TempDir(), "killed")
	if err := trainStopped(cfg, Options{Out: dir}, 4); err == nil {
		t.Fatal("the stop did not stop the run")
	}
	old := readFile(t, filepath.Join(dir, policyFile))
	if bytes.Equal(old, want) {
		t.Fatal("iteration 4's policy is the final one")
	}
	if _, err := Resume(ctx, dir, Options{}); err != nil {
		t.Fatal(err)
	}
	// The state a kill between the two writes left: the last checkpoint, the older policy.
	if err := os.WriteFile(filepath.Join(dir, policyFile), old, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Resume(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Complete {
		t.Error("the resume trained again")
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, policyFile)), want) {
		t.Fatal("after the resume, policy.onnx is not the uninterrupted run's")
	}
	// policy.onnx gone altogether: written again too.
	if err := os.Remove(filepath.Join(dir, policyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, policyFile)), want) {
		t.Fatal("a missing policy.onnx was not written again")
	}
}
