package batcher

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sbinet/npyio/npz"
)

func TestShardsReadableAndConsistent(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", PolicyConfig{})
	b := newBatcher(t, Config{Env: "CartPole-v1", Workers: 2, EnvsPerWorker: 4, Steps: 30, Seed: 3}, p)
	r, err := b.Collect(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	d := openDataset(t, t.TempDir(), DatasetRun{Env: "CartPole-v1", Policy: "../testdata/mlp_tanh.onnx", Seed: 3}, false)
	path, err := d.Write(r)
	if err != nil {
		t.Fatal(err)
	}
	// Read it back with npyio's npz reader, an independent implementation.
	z, err := npz.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	want := []string{"actions.npy", "logp.npy", "next_observations.npy", "observations.npy", "policy_version.npy", "rewards.npy", "terminals.npy", "timeouts.npy", "values.npy"}
	keys := z.Keys()
	slices.Sort(keys)
	if got := strings.Join(keys, ","); got != strings.Join(want, ",") {
		t.Fatalf("keys %s", got)
	}
	if h := z.Header("observations.npy"); h.Descr.Shape[0] != 240 || h.Descr.Shape[1] != 4 || h.Descr.Type != "<f4" {
		t.Fatalf("observations header %+v", h.Descr)
	}
	var obs, next []float32
	var acts []int64
	var term []bool
	for name, dst := range map[string]any{"observations.npy": &obs, "next_observations.npy": &next, "actions.npy": &acts, "terminals.npy": &term} {
		if err := z.Read(name, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Env-major rows: row i·T+t is env i's step t; within an episode, next_observations[k] is observations[k+1].
	for i := range r.N {
		for s := range r.T {
			k := i*r.T + s
			src := s*r.N + i
			if obs[k*4] != r.Obs[src*4] || acts[k] != int64(r.EnvActions[src]) || term[k] != (r.Terminated[src] != 0) {
				t.Fatalf("row %d (env %d step %d) differs from the rollout", k, i, s)
			}
			if s+1 < r.T && !term[k] && r.Truncated[src] == 0 && next[k*4+2] != obs[(k+1)*4+2] {
				t.Fatalf("row %d: next observation is not the following row's observation", k)
			}
		}
	}
}

// failingFile fails with ENOSPC after limit bytes, like a disk filling up.
type failingFile struct {
	f     *os.File
	limit int
}

func (f *failingFile) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n, _ := f.f.Write(p[:f.limit])
		f.limit = 0
		return n, &os.PathError{Op: "write", Path: f.f.Name(), Err: syscall.ENOSPC}
	}
	f.limit -= len(p)
	return f.f.Write(p)
}
func (f *failingFile) Close() error { return f.f.Close() }

func TestFullDiskLeavesOnlyCompleteShards(t *testing.T) {
	b := newBatcher(t, Config{Env: "CartPole-v1", EnvsPerWorker: 8, Steps: 50}, nil)
	dir := t.TempDir()
	d := openDataset(t, dir, DatasetRun{Env: "CartPole-v1"}, false)
	for range 2 {
		r, err := b.Collect(context.Background(), 50)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	d.shards.create = func(name string) (io.WriteCloser, error) {
		f, err := os.Create(name)
		return &failingFile{f: f, limit: 3000}, err
	}
	r, _ := b.Collect(context.Background(), 50)
	if _, err := d.Write(r); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v", err)
	}
	names := shardFiles(t, dir)
	if strings.Join(names, ",") != "shard-000000.npz,shard-000001.npz" {
		t.Fatalf("folder holds %v, want only the two complete shards", names)
	}
	if got := listedShards(t, dir); strings.Join(got, ",") != "shard-000000.npz,shard-000001.npz" {
		t.Fatalf("manifest lists %v, want the two complete shards", got)
	}
	for _, n := range names {
		z, err := npz.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		z.Close()
	}
}

func TestUnwritableOutput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := OpenDataset(filepath.Join(file, "out"), DatasetRun{Env: "CartPole-v1"}, false); err == nil || !strings.Contains(err.Error(), "output folder") {
		t.Fatalf("error %v", err)
	}
}

func TestEvaluate(t *testing.T) {
	ctx := context.Background()
	// Random CartPole: every episode counts, lengths are what the returns say (reward 1 a step).
	res, err := Evaluate(ctx, EvalConfig{Env: "CartPole-v1", Episodes: 25, Envs: 4, Seed: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Returns) != 25 || len(res.Lengths) != 25 {
		t.Fatalf("%d returns, %d lengths", len(res.Returns), len(res.Lengths))
	}
	sum := 0.0
	for i, r := range res.Returns {
		if r != float64(res.Lengths[i]) {
			t.Fatalf("episode %d: return %v, length %d", i, r, res.Lengths[i])
		}
		sum += r
	}
	if res.ReturnMean != sum/25 || res.LengthMean != res.ReturnMean {
		t.Fatalf("mean %v, want %v", res.ReturnMean, sum/25)
	}
	again, _ := Evaluate(ctx, EvalConfig{Env: "CartPole-v1", Episodes: 25, Envs: 4, Seed: 9}, nil)
	if again.ReturnMean != res.ReturnMean {
		t.Fatal("same seed, different evaluation")
	}
	// Pendulum episodes are always 200 steps.
	p := loadPolicy(t, "../testdata/gaussian_relu.onnx", "Pendulum-v1", PolicyConfig{})
	res, err = Evaluate(ctx, EvalConfig{Env: "Pendulum-v1", Episodes: 3, Deterministic: true}, p)
	if err != nil || res.LengthMean != 200 || len(res.Returns) != 3 {
		t.Fatalf("pendulum: %+v %v", res, err)
	}
	if _, err := Evaluate(ctx, EvalConfig{Env: "CartPole-v1"}, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("0 episodes: %v", err)
	}
}
