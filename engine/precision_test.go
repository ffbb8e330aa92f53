package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/internal/kernels"
)

// TestMatmulPrecision: a bf16 run's products are bfloat16's where the CPU has AMX-BF16 (its
// parameters differ from the float32 run's after the same 4 iterations) and float32's bits
// elsewhere; it still learns CartPole as TestTrainCartPoleLearns asks; the process's precision
// is float32 again once it ends; an unknown precision, and a run of the other precision while
// one goes on, are refused.
func TestMatmulPrecision(t *testing.T) {
	run := func(p string, steps int64, eval int) Result {
		t.Helper()
		res, err := Train(context.Background(), Config{Env: "CartPole-v1", TotalSteps: steps, Seed: 3, EvalEpisodes: eval, MatmulPrecision: p},
			Options{Out: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	f32, bf16 := run("", 2048, -1), run("bf16", 2048, -1)
	if got := kernels.GetPrecision(); got != kernels.Float32 {
		t.Fatalf("after a bf16 run the process's products are %v", got)
	}
	if differ := f32.ParamsSHA256 != bf16.ParamsSHA256; differ != BF16Available() {
		t.Fatalf("float32 and bf16 runs' parameters differ: %v; BF16Available %v", differ, BF16Available())
	}
	if r := run("bf16", 40960, 20); r.EvalReturnMean < 150 {
		t.Fatalf("bf16: evaluation return %.1f after 40k steps; a learning PPO is well above 150", r.EvalReturnMean)
	}

	_, err := Train(context.Background(), Config{Env: "CartPole-v1", MatmulPrecision: "fp16"}, Options{})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "fp16") {
		t.Fatalf("MatmulPrecision fp16: %v", err)
	}
	release, err := usePrecision("bf16")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Train(context.Background(), Config{Env: "CartPole-v1", TotalSteps: 2048, EvalEpisodes: -1}, Options{Out: t.TempDir()})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "separate processes") {
		t.Fatalf("a float32 run during a bf16 one: %v", err)
	}
	if again, err := usePrecision("bf16"); err != nil {
		t.Fatalf("a second bf16 run: %v", err)
	} else {
		again()
	}
	release()
	if got := kernels.GetPrecision(); got != kernels.Float32 {
		t.Fatalf("after the bf16 runs the process's products are %v", got)
	}
}
