package cudatower

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/policy"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// dumpDir, when set, is where TestCUDATiming (and TestHostBackendMatchesCPUTower, for its
// Gaussian separate-trunk case) write each minibatch's parameters, rows and the towers'
// gradients (raw little-endian float32 files and a JSON index) for scripts/gpu_tower.py
// check, which computes PyTorch's float64 gradient of the same loss.
var dumpDir = flag.String("dump", "", "write the timed minibatches and gradients here")

// dump writes a minibatch's inputs and gradients (grad_<tower>) under dumpDir/sub.
func dump(t *testing.T, sub string, params *models.Params, mb *learner.SampleBatch, rows int, grads map[string][]float32) {
	t.Helper()
	dir := filepath.Join(*dumpDir, sub)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]float32{"params": params.Data(), "obs": mb.Obs[:rows*mb.ObsDim],
		"actions": mb.Actions[:rows*mb.ActDim], "advantages": mb.Advantages[:rows], "returns": mb.Returns[:rows],
		"logp": mb.LogP[:rows], "values": mb.Values[:rows]}
	maps.Copy(files, grads)
	for name, data := range files {
		var buf bytes.Buffer
		if err := binary.Write(&buf, binary.LittleEndian, data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".f32"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type param struct {
		Name   string `json:"name"`
		Offset int    `json:"offset"`
		Shape  []int  `json:"shape"`
	}
	index := map[string]any{"rows": rows, "obs_dim": mb.ObsDim, "act_dim": mb.ActDim, "coefs": coefs}
	var ps []param
	for i, name := range params.Names() {
		ps = append(ps, param{name, params.Offset(i), params.Shape(i)})
	}
	index["params"] = ps
	if err := os.WriteFile(filepath.Join(dir, "index.json"), []byte(mustJSON(index)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostBackend is the backend in Go on the host: cuBLAS's column-major product written out
// from its definition (sums in float64) and the two kernels, over one arena of float32s.
// With it the tower's whole pass (layer order, transposes, leading dimensions, gradient
// offsets, the loss on the heads) is checked here against the CPU tower, without a GPU.
type hostBackend struct {
	mem    []float32
	closed bool
}

// at is the slice of n float32s at p.
func (h *hostBackend) at(p ptr, n int) []float32 { return h.mem[p/4 : int(p/4)+n] }

func (h *hostBackend) alloc(n int) (ptr, error) {
	if len(h.mem) == 0 {
		h.mem = make([]float32, 1) // address 0 is no buffer
	}
	p := ptr(4 * len(h.mem))
	h.mem = append(h.mem, make([]float32, max(n, 1))...)
	return p, nil
}
func (h *hostBackend) free(ptr) error { return nil }
func (h *hostBackend) upload(dst ptr, src []float32) error {
	copy(h.at(dst, len(src)), src)
	return nil
}
func (h *hostBackend) download(dst []float32, src ptr) error {
	copy(dst, h.at(src, len(dst)))
	return nil
}
func (h *hostBackend) close() error { h.closed = true; return nil }

func (h *hostBackend) fill(dst ptr, n int, v float32) error {
	for i := range h.at(dst, n) {
		h.mem[int(dst/4)+i] = v
	}
	return nil
}

func (h *hostBackend) gemm(transA, transB bool, m, n, k int, a ptr, lda int, b ptr, ldb int, beta float32, c ptr, ldc int) error {
	A, B, C := h.mem[a/4:], h.mem[b/4:], h.mem[c/4:]
	for j := range n {
		for i := range m {
			var s float64
			for p := range k {
				av, bv := A[i+p*lda], B[p+j*ldb]
				if transA {
					av = A[p+i*lda]
				}
				if transB {
					bv = B[j+p*ldb]
				}
				s += float64(av) * float64(bv)
			}
			if beta != 0 {
				s += float64(beta) * float64(C[i+j*ldc])
			}
			C[i+j*ldc] = float32(s)
		}
	}
	return nil
}

func (h *hostBackend) biasAct(y, b ptr, rows, cols, act int) error {
	Y, bias := h.at(y, rows*cols), h.at(b, cols)
	for i := range Y {
		v := Y[i] + bias[i%cols]
		switch act {
		case actTanh:
			v = float32(math.Tanh(float64(v)))
		case actReLU:
			v = max(v, 0)
		}
		Y[i] = v
	}
	return nil
}

func (h *hostBackend) actGrad(dz, y ptr, n, act int) error {
	D, Y := h.at(dz, n), h.at(y, n)
	for i := range D {
		switch act {
		case actTanh:
			D[i] *= 1 - Y[i]*Y[i]
		case actReLU:
			if Y[i] <= 0 {
				D[i] = 0
			}
		}
	}
	return nil
}

// archCase is one architecture the tests train.
type archCase struct {
	name string
	cfg  models.Config
}

func archCases(obs int, hidden []int) []archCase {
	cat := head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{obs}}
	box := head.Spec{Head: head.GaussianKind, Low: []float32{-1, -2}, High: []float32{1, 2}, ObsShape: []int{obs}}
	return []archCase{
		{"categorical/separate/tanh", models.Config{Spec: cat, Hidden: hidden}},
		{"categorical/shared/relu", models.Config{Spec: cat, Hidden: hidden, Shared: true, Activation: models.ReLU}},
		{"gaussian/separate/tanh", models.Config{Spec: box, Hidden: hidden, LogStdInit: -0.5}},
		{"gaussian/shared/tanh", models.Config{Spec: box, Hidden: hidden, Shared: true}},
	}
}

// minibatch is rows random rows for spec: observations N(0, 1), actions valid for the head,
// behaviour log-probabilities and values near what a fresh policy gives, so that some rows
// clip and some do not.
func minibatch(rng *rand.Rand, spec head.Spec, obs, rows int) *learner.SampleBatch {
	actDim := 1
	if spec.Head != head.CategoricalKind {
		actDim = spec.ActionDim()
	}
	b := learner.NewSampleBatch(rows, obs, actDim, 0)
	if err := b.SetLen(rows); err != nil {
		panic(err)
	}
	for i := range b.Obs[:rows*obs] {
		b.Obs[i] = float32(rng.NormFloat64())
	}
	for i := range b.Actions[:rows*actDim] {
		if spec.Head == head.CategoricalKind {
			b.Actions[i] = float32(rng.IntN(spec.N))
		} else {
			b.Actions[i] = float32(rng.NormFloat64())
		}
	}
	for i := range rows {
		b.Advantages[i] = float32(rng.NormFloat64())
		b.Returns[i] = float32(rng.NormFloat64())
		b.Values[i] = float32(0.3 * rng.NormFloat64())
		b.LogP[i] = float32(-1.2 + 0.2*rng.NormFloat64())
	}
	return b
}

var coefs = ppo.Coefs{ClipCoef: 0.2, ClipVLoss: true, EntCoef: 0.01, VfCoef: 0.5}

// relErr is ‖got − want‖ / ‖want‖.
func relErr(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		w += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(d / w)
}

// compare runs the tower and the CPU tower of package engine on the same minibatch and
// checks the gradients (≤ tol relative over the whole vector, ≤ 10·tol per parameter, whose
// small gradients, a bias's say, cancel more) and the statistics (≤ tol), and returns the
// whole vector's relative error and the worst parameter's.
func compare(t *testing.T, tw learner.Tower, params *models.Params, mb *learner.SampleBatch, rows int, tol float64) (all, worst float64, got, want []float32) {
	t.Helper()
	ref, err := policy.Towers(params, &ppo.PPO{Coefs: coefs})(0, device.CPU(), rows, params.Data())
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want, got = make([]float32, params.Size()), make([]float32, params.Size())
	wantStats, gotStats := make([]float64, len(ref.StatNames())), make([]float64, len(tw.StatNames()))
	if err := ref.Grad(mb, want, wantStats); err != nil {
		t.Fatal(err)
	}
	if err := tw.Grad(mb, got, gotStats); err != nil {
		t.Fatal(err)
	}
	all = relErr(got, want)
	if all > tol {
		t.Errorf("gradient differs from the CPU tower's by %.3g (relative), want ≤ %g", all, tol)
	}
	for i, name := range params.Names() {
		lo, hi := params.Offset(i), params.Size()
		if i+1 < params.Len() {
			hi = params.Offset(i + 1)
		}
		e := relErr(got[lo:hi], want[lo:hi])
		if math.IsNaN(e) { // an all-zero gradient (a ReLU unit dead on every row) must stay zero
			e = 0
			for k := lo; k < hi; k++ {
				if got[k] != 0 {
					e = math.Inf(1)
				}
			}
		}
		worst = max(worst, e)
		if e > 10*tol {
			t.Errorf("%s: gradient differs from the CPU tower's by %.3g (relative)", name, e)
		}
	}
	for k, name := range ref.StatNames() {
		if d := math.Abs(gotStats[k] - wantStats[k]); d > tol*math.Max(1, math.Abs(wantStats[k])) {
			t.Errorf("statistic %s = %g, the CPU tower's %g", name, gotStats[k], wantStats[k])
		}
	}
	return all, worst, got, want
}

// TestHostBackendMatchesCPUTower: the tower's passes, run on the host backend, give the CPU
// tower's PPO gradients within 1e-5 (relative) for categorical and Gaussian heads, separate
// and shared trunks, tanh and ReLU.
func TestHostBackendMatchesCPUTower(t *testing.T) {
	const obs, rows = 5, 37
	for i, c := range archCases(obs, []int{16, 8}) {
		t.Run(c.name, func(t *testing.T) {
			params, err := models.NewParams(c.cfg, rand.New(rand.NewPCG(uint64(i), 1)))
			if err != nil {
				t.Fatal(err)
			}
			// Larger output layers than CleanRL's 0.01 gain, so the heads' gradients are
			// not all small.
			for k := range params.Data() {
				params.Data()[k] *= 1.5
			}
			be := &hostBackend{}
			tw, err := newTower(be, params, params.Data(), rows, &ppo.PPO{Coefs: coefs})
			if err != nil {
				t.Fatal(err)
			}
			mb := minibatch(rand.New(rand.NewPCG(uint64(i), 2)), c.cfg.Spec, obs, rows)
			all, worst, got, want := compare(t, tw, params, mb, rows, 1e-5)
			t.Logf("gradient relative error %.2g, worst parameter %.2g", all, worst)
			if *dumpDir != "" && c.name == "gaussian/separate/tanh" {
				dump(t, "host", params, mb, rows, map[string][]float32{"grad_host": got, "grad_cpu": want})
			}
			if err := tw.Close(); err != nil || !be.closed {
				t.Errorf("Close: %v (backend closed: %v)", err, be.closed)
			}
			if err := tw.Grad(mb, make([]float32, params.Size()), make([]float64, len(tw.StatNames()))); err == nil {
				t.Error("Grad after Close succeeded")
			}
		})
	}
}

// TestTowerRefuses: bad input gets an error naming it.
func TestTowerRefuses(t *testing.T) {
	spec := head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{5}}
	params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	alg := &ppo.PPO{Coefs: coefs}
	if _, err := newTower(&hostBackend{}, params, params.Clone().Data(), 8, alg); err == nil || !strings.Contains(err.Error(), "own parameter vector") {
		t.Errorf("a copy of the parameters: %v", err)
	}
	if _, err := newTower(&hostBackend{}, params, params.Data(), 0, alg); err == nil {
		t.Error("a tower of 0 rows was built")
	}
	img := head.Spec{Head: head.CategoricalKind, N: 3, ObsShape: []int{4, 84, 84}}
	cnn, err := models.NewParams(models.Config{Spec: img, Arch: models.NatureCNN}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newTower(&hostBackend{}, cnn, cnn.Data(), 8, alg); !errors.Is(err, ErrArch) {
		t.Errorf("a Nature CNN: %v, want ErrArch", err)
	}
	tw, err := newTower(&hostBackend{}, params, params.Data(), 8, alg)
	if err != nil {
		t.Fatal(err)
	}
	defer tw.Close()
	grads, stats := make([]float32, params.Size()), make([]float64, len(tw.StatNames()))
	if err := tw.Grad(minibatch(rand.New(rand.NewPCG(1, 2)), spec, 5, 7), grads, stats); err == nil || !strings.Contains(err.Error(), "8 rows got 7") {
		t.Errorf("7 rows for 8: %v", err)
	}
	if err := tw.Grad(minibatch(rand.New(rand.NewPCG(1, 2)), spec, 4, 8), grads, stats); err == nil || !strings.Contains(err.Error(), "observation") {
		t.Errorf("4 observation values for 5: %v", err)
	}
	if err := tw.Grad(minibatch(rand.New(rand.NewPCG(1, 2)), spec, 5, 8), grads[1:], stats); err == nil || !strings.Contains(err.Error(), "gradient buffer") {
		t.Errorf("a short gradient buffer: %v", err)
	}
	if _, err := Towers(params, alg)(0, device.CPU(), 8, params.Clone().Data()); err == nil {
		t.Error("the factory took a copy of the parameters")
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
