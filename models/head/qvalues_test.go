package head

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestQValuesHandWorked: greedy picks the first of the largest Q-values; the ε-greedy
// log-probabilities are log(1 − ε + ε/N) and log(ε/N), worked by hand for ε = 0.1, N = 4
// (0.925 and 0.025); ε = 0 is greedy with log-probability 0, and −Inf for other actions; a
// NaN Q-value and an ε outside [0, 1] are errors naming them.
func TestQValuesHandWorked(t *testing.T) {
	q := []float32{1, 3, 3, 2, -1, -5, -0.5, -2}
	acts := make([]int32, 2)
	logp := make([]float32, 2)
	h := QValues{N: 4, Epsilon: 0.1}
	if err := h.Mode(q, acts, logp); err != nil || acts[0] != 1 || acts[1] != 2 || logp[0] != 0 {
		t.Fatalf("Mode: %v %v %v", acts, logp, err)
	}
	if err := h.LogProb(q, []int32{1, 0}, logp); err != nil ||
		math.Abs(float64(logp[0])-math.Log(0.925)) > 1e-7 || math.Abs(float64(logp[1])-math.Log(0.025)) > 1e-7 {
		t.Fatalf("LogProb: %v %v, want log 0.925 = %v and log 0.025 = %v", logp, err, math.Log(0.925), math.Log(0.025))
	}
	greedy := QValues{N: 4}
	if err := greedy.LogProb(q, []int32{2, 2}, logp); err != nil || !math.IsInf(float64(logp[0]), -1) || logp[1] != 0 {
		t.Fatalf("ε = 0: %v %v", logp, err)
	}
	rngs := []*rand.Rand{rand.New(rand.NewPCG(1, 1)), rand.New(rand.NewPCG(2, 2))}
	for range 100 {
		if err := greedy.SampleRows(rngs, q, acts, nil); err != nil || acts[0] != 1 || acts[1] != 2 {
			t.Fatalf("ε = 0 samples %v %v, want the greedy actions 1 and 2", acts, err)
		}
	}
	bad := []float32{1, float32(math.NaN()), 0, 0}
	if err := h.Mode(bad, acts[:1], nil); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("a NaN Q-value: %v", err)
	}
	if err := (QValues{N: 4, Epsilon: 1.5}).Mode(q, acts, nil); err == nil || !strings.Contains(err.Error(), "ε") {
		t.Errorf("ε = 1.5: %v", err)
	}
}

// TestQValuesFrequencies: over 200,000 draws with ε = 0.3 and N = 5, each action's frequency
// is its ε-greedy probability (0.76 for the greedy one, 0.06 for each other) within 5 standard
// errors, and the recorded log-probabilities are LogProb's.
func TestQValuesFrequencies(t *testing.T) {
	const n, draws = 5, 200_000
	h := QValues{N: n, Epsilon: 0.3}
	q := []float32{0.5, -1, 2, 1.9, 0}
	rng := []*rand.Rand{rand.New(rand.NewPCG(9, 9))}
	count := make([]int, n)
	act, logp, want := make([]int32, 1), make([]float32, 1), make([]float32, 1)
	for range draws {
		if err := h.SampleRows(rng, q, act, logp); err != nil {
			t.Fatal(err)
		}
		count[act[0]]++
		if err := h.LogProb(q, act, want); err != nil || logp[0] != want[0] {
			t.Fatalf("action %d: log-probability %v, LogProb %v (%v)", act[0], logp[0], want[0], err)
		}
	}
	for a, c := range count {
		p := 0.3 / n
		if a == 2 {
			p += 0.7
		}
		se := math.Sqrt(p * (1 - p) / draws)
		if f := float64(c) / draws; math.Abs(f-p) > 5*se {
			t.Errorf("action %d drawn %.4f of the time, want %.4f ± %.4f", a, f, p, 5*se)
		}
	}
}

// TestQValuesSpec: a qvalues spec is a Discrete one whose ε travels in the metadata and back;
// an ε outside [0, 1] in the metadata is refused.
func TestQValuesSpec(t *testing.T) {
	s := Spec{Head: QValuesKind, N: 3, EnvID: "CartPole-v1", ObsShape: []int{4}, Epsilon: 0.05, Version: 2}
	if err := s.Validate(); err != nil || s.ActionDim() != 3 || s.ActionSpace() != "discrete:3" {
		t.Fatalf("spec %+v: %v, %d, %s", s, err, s.ActionDim(), s.ActionSpace())
	}
	back, ok, err := FromMetadata(s.Metadata())
	if err != nil || !ok || back.Head != QValuesKind || back.Epsilon != 0.05 || back.N != 3 || back.Version != 2 {
		t.Fatalf("round trip: %+v %v %v", back, ok, err)
	}
	m := s.Metadata()
	m[KeyEpsilon] = "2"
	if _, _, err := FromMetadata(m); err == nil || !strings.Contains(err.Error(), "ε") {
		t.Errorf("ε = 2 in the metadata: %v", err)
	}
	m[KeyEpsilon] = "often"
	if _, _, err := FromMetadata(m); err == nil || !strings.Contains(err.Error(), KeyEpsilon) {
		t.Errorf("ε = often in the metadata: %v", err)
	}
}
