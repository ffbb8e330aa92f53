package onnx

import (
	"flag"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// cudaTests turns on the tests that need an NVIDIA GPU, the CUDA provider plugin in the cache
// (or the one XDG_CACHE_HOME's towerrl folder holds) and the CUDA 13 libraries on
// LD_LIBRARY_PATH: scripts/gpu_check.sh runs them on the GPU machine with
//
//	onnx.test -test.run CUDA -test.v -cuda
var cudaTests = flag.Bool("cuda", false, "run the tests that need the CUDA provider and a GPU")

// fillRandom writes n rows of random inputs for the fixture's input into s and returns them.
func fillRandom(t *testing.T, s *Session, name string, n int, rng *rand.Rand) []float32 {
	t.Helper()
	info := s.Inputs()[0]
	x := make([]float32, n*info.RowSize())
	for i := range x {
		if name == "nature_cnn" {
			x[i] = float32(rng.IntN(256)) // pixels held in float32
		} else {
			x[i] = float32(rng.Float64()*4 - 2)
		}
	}
	if _, err := Feed(s, 0, info.Shape(n), x); err != nil {
		t.Fatal(err)
	}
	return x
}

// relErr is ‖got − want‖ / ‖want‖ over the first n elements.
func relErr(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / w)
}

// outputs copies the first n rows of every output of s.
func outputs(t *testing.T, s *Session, n int) [][]float32 {
	t.Helper()
	var out [][]float32
	for i, info := range s.Outputs() {
		buf, err := Output[float32](s, i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), buf[:n*info.RowSize()]...))
	}
	return out
}

// TestRebindInputsOnCPU runs the path a CUDA session takes at every Run (binding the inputs
// again) on CPU: outputs follow what was fed, and Run allocates at most one small value per
// input (onnxruntime_go's BindInput makes one).
func TestRebindInputsOnCPU(t *testing.T) {
	plain := open(t, "mlp_tanh", Config{MaxBatch: 64})
	rebound := open(t, "mlp_tanh", Config{MaxBatch: 64})
	rebound.rebind = true
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 3 {
		x := fillRandom(t, plain, "mlp_tanh", 32, rng)
		if _, err := Feed(rebound, 0, plain.Inputs()[0].Shape(32), x); err != nil {
			t.Fatal(err)
		}
		for _, s := range []*Session{plain, rebound} {
			if err := s.Run(32); err != nil {
				t.Fatal(err)
			}
		}
		want, got := outputs(t, plain, 32), outputs(t, rebound, 32)
		for k := range want {
			if e := relErr(got[k], want[k]); e != 0 {
				t.Fatalf("round %d output %d: relative difference %g", round, k, e)
			}
		}
	}
	if a := testing.AllocsPerRun(50, func() {
		if err := rebound.Run(32); err != nil {
			t.Fatal(err)
		}
	}); a > float64(len(rebound.Inputs())) {
		t.Errorf("%v allocations per Run with the inputs bound again, want at most one per input", a)
	}
}

// TestCUDAFreshInputs: on the GPU, every Run of a CUDA session computes on what was fed since
// the last Run (same batch size, so the same I/O binding), within 1e-5 of the CPU provider
// with TF32 off. It also logs what a kept binding does (ONNX Runtime copies the input when it
// is bound), the reason Run binds the inputs again on CUDA.
func TestCUDAFreshInputs(t *testing.T) {
	if !*cudaTests {
		t.Skip("needs a GPU: run with -cuda (scripts/gpu_check.sh does on the GPU machine)")
	}
	for _, name := range []string{"mlp_tanh", "nature_cnn"} {
		t.Run(name, func(t *testing.T) {
			cpu := open(t, name, Config{MaxBatch: 64})
			gpu := open(t, name, Config{MaxBatch: 64, Provider: ProviderCUDA, CUDAOptions: map[string]string{"use_tf32": "0"}})
			if gpu.Provider() != ProviderCUDA || !gpu.rebind || !gpu.PinnedHost() {
				t.Fatalf("provider %s, rebind %v, pinned host buffers %v", gpu.Provider(), gpu.rebind, gpu.PinnedHost())
			}
			rng := rand.New(rand.NewPCG(1, 2))
			const n = 48
			var previous [][]float32
			for round := range 4 {
				x := fillRandom(t, cpu, name, n, rng)
				if _, err := Feed(gpu, 0, cpu.Inputs()[0].Shape(n), x); err != nil {
					t.Fatal(err)
				}
				stale := round == 3 // the last round keeps the binding as it was
				gpu.rebind = !stale
				for _, s := range []*Session{cpu, gpu} {
					if err := s.Run(n); err != nil {
						t.Fatal(err)
					}
				}
				want, got := outputs(t, cpu, n), outputs(t, gpu, n)
				for k := range want {
					e := relErr(got[k], want[k])
					if stale {
						t.Logf("without binding again: output %d differs from this Run's inputs' by %.2g and from the previous Run's by %.2g",
							k, e, relErr(got[k], previous[k]))
						continue
					}
					t.Logf("round %d output %d: relative error %.2g against CPU", round, k, e)
					if e > 1e-5 {
						t.Errorf("round %d output %d: relative error %g against the CPU provider", round, k, e)
					}
				}
				previous = want
			}
		})
	}
}

// TestPageAligned: page-locked buffers start on a page and own their pages.
func TestPageAligned(t *testing.T) {
	for _, n := range []int{1, 511, 512, 513, 100000} {
		a, b := pageAligned(n), pageAligned(n)
		pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
		if pa%pageSize != 0 || len(a)*8%pageSize != 0 || len(a) < n || cap(a) != len(a) {
			t.Fatalf("n=%d: start %#x, %d elements, cap %d", n, pa, len(a), cap(a))
		}
		if pa < pb+uintptr(len(b)*8) && pb < pa+uintptr(len(a)*8) {
			t.Fatalf("n=%d: two buffers share memory", n)
		}
	}
}

// TestPinHostWithoutCUDA: without a CUDA runtime, page-locking says so (a CUDA session then
// keeps pageable buffers and logs why); with one, it works and is undone.
func TestPinHostWithoutCUDA(t *testing.T) {
	mem := pageAligned(1024)
	if err := pinHost(mem); err != nil {
		if !strings.Contains(err.Error(), "libcudart.so.13") {
			t.Fatalf("error %q does not name libcudart.so.13", err)
		}
		return
	}
	t.Log("this machine has a CUDA runtime: page-locked and unlocked 8 KiB")
	if err := unpinHost(mem); err != nil {
		t.Fatal(err)
	}
}

// reselectWeights runs the sequence that needs a set's copy refreshed on CUDA: set A at batch
// 16, set B at batch 8, then A rewritten and selected again at batch 16, whose binding last
// bound A before it was rewritten. It returns each step's outputs.
func reselectWeights(t *testing.T, s *Session, defaults [][]float32, obs []float32) [][][]float32 {
	t.Helper()
	a, err := s.NewWeights(perturbed(defaults, rand.New(rand.NewPCG(1, 1)), 0.1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.NewWeights(perturbed(defaults, rand.New(rand.NewPCG(2, 2)), 0.1))
	if err != nil {
		t.Fatal(err)
	}
	var steps [][][]float32
	for k, step := range []struct {
		set   *Weights
		batch int
	}{{a, 16}, {b, 8}, {a, 16}} {
		if k == 2 {
			for i, buf := range perturbed(defaults, rand.New(rand.NewPCG(3, 3)), 0.1) {
				copy(a.Buffers()[i], buf)
			}
		}
		if err := s.UseWeights(step.set); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, outputsOf(t, s, obs, step.batch))
	}
	return steps
}

// TestWeightsReselectedOnCPU runs, on CPU, the path that binds a set again when it is
// selected again (CUDA's): the outputs are the plain session's, and the binding records the
// selection it bound.
func TestWeightsReselectedOnCPU(t *testing.T) {
	_, data := readModel(t, "mlp_tanh")
	defaults, err := WeightValues(data, mlpWeights)
	if err != nil {
		t.Fatal(err)
	}
	obs := readNPY(t, filepath.Join(fixtures, "mlp_tanh.input.npy")).F32
	plain := newSession(t, data, Config{MaxBatch: 16, Weights: mlpWeights})
	rebound := newSession(t, data, Config{MaxBatch: 16, Weights: mlpWeights})
	rebound.rebind = true
	want, got := reselectWeights(t, plain, defaults, obs), reselectWeights(t, rebound, defaults, obs)
	for k := range want {
		if d := maxDiff(got[k], want[k]); d != 0 {
			t.Fatalf("step %d: outputs differ by %g", k, d)
		}
	}
	if b := rebound.bindings[16]; b.use != rebound.uses {
		t.Fatalf("batch 16's binding bound selection %d, the session is at %d", b.use, rebound.uses)
	}
}

// TestCUDAFedWeights: on the GPU, a weight set rewritten and selected again is what the next
// Run of every batch size computes with, within 1e-5 of the CPU provider.
func TestCUDAFedWeights(t *testing.T) {
	if !*cudaTests {
		t.Skip("needs a GPU: run with -cuda (scripts/gpu_check.sh does on the GPU machine)")
	}
	_, data := readModel(t, "mlp_tanh")
	defaults, err := WeightValues(data, mlpWeights)
	if err != nil {
		t.Fatal(err)
	}
	obs := readNPY(t, filepath.Join(fixtures, "mlp_tanh.input.npy")).F32
	cpu := newSession(t, data, Config{MaxBatch: 16, Weights: mlpWeights})
	gpu := newSession(t, data, Config{MaxBatch: 16, Weights: mlpWeights, Provider: ProviderCUDA,
		CUDAOptions: map[string]string{"use_tf32": "0"}})
	want, got := reselectWeights(t, cpu, defaults, obs), reselectWeights(t, gpu, defaults, obs)
	for k := range want {
		for o := range want[k] {
			e := relErr(got[k][o], want[k][o])
			t.Logf("step %d output %d: relative error %.2g against CPU", k, o, e)
			if e > 1e-5 {
				t.Errorf("step %d output %d: relative error %g against the CPU provider", k, o, e)
			}
		}
	}
}
