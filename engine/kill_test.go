package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// killRuns are the runs the kill test interrupts, by name: long enough (24 iterations, a
// checkpoint every 3) that random kill times land before the first iteration, between
// checkpoints, during a checkpoint or a resume, and near the end. PPO's (which evaluates every
// 4 iterations, keeping best_policy.onnx: kills land in evaluations too), and the off-policy
// loop's with DQN and SAC (their checkpoints hold the replay buffer and the sampling stream),
// SAC fine-tuning a foreign actor, and SAC with gSDE (its noise matrix drawn from the sampling
// stream every 2 steps, so that collections are made of several pieces).
var killRuns = map[string]Config{
	"ppo": {Env: "CartPole-v1", TotalSteps: 512 * 24, CheckpointEvery: 3, Seed: 11, EvalEpisodes: 2, EvalEvery: 4},
	"dqn": {Env: "CartPole-v1", Algo: "dqn", TotalSteps: 200 * 24, Envs: 2, TrainFreq: 4, RolloutSteps: 100, LearningStarts: 300,
		TargetUpdateInterval: 100, Hidden: []int{32, 32}, CheckpointEvery: 3, Seed: 11, EvalEpisodes: -1},
	"sac": {Env: "Pendulum-v1", Algo: "sac", TotalSteps: 50 * 24, TrainFreq: 5, RolloutSteps: 50, GradientSteps: 2, LearningStarts: 200,
		BatchSize: 32, Hidden: []int{32, 32}, CheckpointEvery: 3, Seed: 11, EvalEpisodes: -1},
	// SAC fine-tuning SB3's Pendulum actor: the checkpoints also hold the policy fine-tuned,
	// and kills land before and after the new critics' warm-up (the first 50 of 200 updates).
	"sac-init": {Env: "Pendulum-v1", Algo: "sac", InitPolicy: absPath(filepath.Join("..", "testdata", "foreign", "sb3_sac_pendulum.onnx")),
		TotalSteps: 50 * 24, TrainFreq: 5, RolloutSteps: 50, LearningStarts: 200, BatchSize: 32, CriticWarmup: 50,
		CheckpointEvery: 3, Seed: 11, EvalEpisodes: -1},
	"sac-sde": {Env: "Pendulum-v1", Algo: "sac", TotalSteps: 50 * 24, TrainFreq: 5, RolloutSteps: 50, GradientSteps: 2, LearningStarts: 200,
		BatchSize: 32, Hidden: []int{32, 32}, CheckpointEvery: 3, Seed: 11, EvalEpisodes: -1, UseSDE: true, SDESampleFreq: 2, LogStdInit: -2},
}

// absPath is p made absolute (a config's InitPolicy is stored so); p itself if that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// TestMain lets the kill test run Train or Resume in a child process (this test binary, with
// TOWERRL_KILL_CHILD set to the run directory), which the parent SIGKILLs.
func TestMain(m *testing.M) {
	if dir := os.Getenv("TOWERRL_KILL_CHILD"); dir != "" {
		var err error
		if _, serr := os.Stat(filepath.Join(dir, configFile)); serr == nil {
			_, err = Resume(context.Background(), dir, Options{})
		} else {
			_, err = Train(context.Background(), killRuns[os.Getenv("TOWERRL_KILL_RUN")], Options{Out: dir})
		}
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
