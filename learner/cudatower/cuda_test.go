//go:build towerrl_cuda

package cudatower

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/device/devicetest"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/internal/cuda"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// cudaTests turns on the tests that need an NVIDIA GPU, its driver and cuBLAS on the library
// path: scripts/gpu_tower.sh runs them on the GPU machine with
//
//	cudatower.test -test.run CUDA -test.v -cuda
var cudaTests = flag.Bool("cuda", false, "run the tests that need an NVIDIA GPU")

// openGPU opens cuda:0, or ends the test when -cuda is not set (a build with the tag on a
// machine without a GPU).
func openGPU(t *testing.T) device.Device {
	t.Helper()
	if !*cudaTests {
		t.Skip("needs a GPU: run with -cuda (scripts/gpu_tower.sh)")
	}
	dev, err := device.CUDA(0)
	if err != nil {
		t.Fatal(err)
	}
	return dev
}

// TestCUDADevice: device.CUDA passes the device conformance suite.
func TestCUDADevice(t *testing.T) {
	dev := openGPU(t)
	t.Logf("%+v", dev.(interface{ CUDAContext() *cuda.Context }).CUDAContext().Info())
	devicetest.Run(t, dev)
}

// TestCUDAMatchesCPUTower: the GPU tower's PPO gradients of a 256×256 MLP agree with the CPU
// tower's within 1e-5 (relative, the whole vector) at minibatches of 256 and 4096 rows, for
// categorical and Gaussian heads, separate and shared trunks, tanh and ReLU.
func TestCUDAMatchesCPUTower(t *testing.T) {
	dev := openGPU(t)
	defer dev.Close()
	const obs = 17
	for _, rows := range []int{256, 4096} {
		for i, c := range archCases(obs, []int{256, 256}) {
			t.Run(fmt.Sprintf("%s/%d", c.name, rows), func(t *testing.T) {
				params, err := models.NewParams(c.cfg, rand.New(rand.NewPCG(uint64(i), 1)))
				if err != nil {
					t.Fatal(err)
				}
				for k := range params.Data() {
					params.Data()[k] *= 1.5
				}
				tw, err := Towers(params, &ppo.PPO{Coefs: coefs})(0, dev, rows, params.Data())
				if err != nil {
					t.Fatal(err)
				}
				defer tw.Close()
				mb := minibatch(rand.New(rand.NewPCG(uint64(i), 2)), c.cfg.Spec, obs, rows)
				all, worst, _, _ := compare(t, tw, params, mb, rows, 1e-5)
				t.Logf("gradient relative error %.2g, worst parameter %.2g", all, worst)
				fmt.Printf("CHECK %s\n", mustJSON(map[string]any{"arch": c.name, "rows": rows, "rel_err": all, "worst_param_rel_err": worst}))
			})
		}
	}
}

// TestCUDATiming times one Grad of the GPU tower and of the CPU tower (package engine) on a
// 256×256 tanh MLP with a Gaussian head of 6 actions over 17 observations (HalfCheetah's
// sizes), at 256 and 4096 rows: the median of the timed calls after warm-up ones, each call
// from the host parameters and minibatch to the host gradient. It prints one TIMING line of
// JSON per tower and size.
func TestCUDATiming(t *testing.T) {
	dev := openGPU(t)
	defer dev.Close()
	spec := head.Spec{Head: head.GaussianKind, Low: slices.Repeat([]float32{-1}, 6), High: slices.Repeat([]float32{1}, 6), ObsShape: []int{17}}
	params, err := models.NewParams(models.Config{Spec: spec, Hidden: []int{256, 256}}, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	alg := &ppo.PPO{Coefs: coefs}
	for _, rows := range []int{256, 4096} {
		mb := minibatch(rand.New(rand.NewPCG(3, 4)), spec, 17, rows)
		last := map[string][]float32{}
		for _, on := range []string{"cuda", "cpu"} {
			var tw learner.Tower
			if on == "cuda" {
				tw, err = Towers(params, alg)(0, dev, rows, params.Data())
			} else {
				tw, err = policy.Towers(params, alg)(0, device.CPU(), rows, params.Data())
			}
			if err != nil {
				t.Fatal(err)
			}
			if on == "cuda" && rows == 256 {
				t.Logf("%+v", dev.(interface{ CUDAContext() *cuda.Context }).CUDAContext().Info())
			}
			calls := 200
			if on == "cpu" {
				calls = max(10, 200*256/rows)
			}
			grads, stats := make([]float32, params.Size()), make([]float64, len(tw.StatNames()))
			for range 10 {
				if err := tw.Grad(mb, grads, stats); err != nil {
					t.Fatal(err)
				}
			}
			var lossBefore time.Duration
			if g, ok := tw.(*tower); ok {
				lossBefore = g.lossTime
			}
			times := make([]float64, calls)
			for k := range times {
				start := time.Now()
				if err := tw.Grad(mb, grads, stats); err != nil {
					t.Fatal(err)
				}
				times[k] = float64(time.Since(start).Microseconds()) / 1000
			}
			slices.Sort(times)
			rec := map[string]any{"tower": on, "rows": rows, "calls": calls, "ms_median": times[calls/2],
				"ms_min": times[0], "ms_p90": times[calls*9/10], "params": params.Size()}
			if g, ok := tw.(*tower); ok {
				rec["ms_loss_cpu_mean"] = float64((g.lossTime - lossBefore).Microseconds()) / 1000 / float64(calls)
			}
			fmt.Printf("TIMING %s\n", mustJSON(rec))
			t.Logf("%s tower, %d rows: median %.3f ms a Grad", on, rows, times[calls/2])
			last["grad_"+on] = grads
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if e := relErr(last["grad_cuda"], last["grad_cpu"]); e > 1e-5 {
			t.Errorf("%d rows: the timed towers' gradients differ by %.3g (relative)", rows, e)
		}
		if *dumpDir != "" {
			dump(t, fmt.Sprintf("rows%d", rows), params, mb, rows, last)
		}
	}
}

// TestCUDATowersUpdate: learner.Towers with one or two towers on the GPU (Devices) take the
// same Adam steps as one CPU tower: after 5 updates of 4096 rows the parameters agree within
// 1e-5 (relative). It prints one TIMING line per set of towers: the median Update.
func TestCUDATowersUpdate(t *testing.T) {
	dev := openGPU(t)
	defer dev.Close()
	spec := head.Spec{Head: head.GaussianKind, Low: slices.Repeat([]float32{-1}, 6), High: slices.Repeat([]float32{1}, 6), ObsShape: []int{17}}
	const rows = 4096
	mb := minibatch(rand.New(rand.NewPCG(5, 5)), spec, 17, rows)
	alg := &ppo.PPO{Coefs: coefs}
	train := func(on string, n int) []float32 {
		params, err := models.NewParams(models.Config{Spec: spec, Hidden: []int{256, 256}}, rand.New(rand.NewPCG(5, 6)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := learner.TowersConfig{N: n, Minibatch: rows, MaxGradNorm: 0.5, NormalizeAdvantages: true}
		factory := policy.Towers(params, alg)
		if on == "cuda" {
			cfg.Devices = slices.Repeat([]device.Device{dev}, n)
			factory = Towers(params, alg)
		}
		tw, err := learner.NewTowers(cfg, params.Data(), learner.NewAdam(params.Size(), learner.Constant(3e-4), 0.9, 0.999, 1e-5), mb, factory)
		if err != nil {
			t.Fatal(err)
		}
		defer tw.Close()
		b := learner.NewSampleBatch(rows, 17, 6, 0)
		times := make([]float64, 5)
		for k := range times {
			if err := b.SetLen(0); err != nil {
				t.Fatal(err)
			}
			if err := b.Append(mb); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := tw.Update(context.Background(), b, 0, rows); err != nil {
				t.Fatal(err)
			}
			times[k] = float64(time.Since(start).Microseconds()) / 1000
		}
		slices.Sort(times)
		fmt.Printf("TIMING %s\n", mustJSON(map[string]any{"update": on, "towers": n, "rows": rows, "updates": 5, "ms_median": times[2]}))
		return params.Data()
	}
	want := train("cpu", 1)
	for _, n := range []int{1, 2} {
		got := train("cuda", n)
		if e := relErr(got, want); e > 1e-5 {
			t.Errorf("%d GPU towers: parameters after 5 updates differ from the CPU tower's by %.3g (relative)", n, e)
		} else {
			t.Logf("%d GPU towers: parameters after 5 updates within %.2g of the CPU tower's", n, e)
		}
	}
}
