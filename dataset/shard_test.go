package dataset

import (
	"bytes"
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

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
)

func TestShardsReadableAndConsistent(t *testing.T) {
	p := loadPolicy(t, "../testdata/mlp_tanh.onnx", "CartPole-v1", bind.Config{})
	b := newBatcher(t, batcher.Config{Env: envSpec("CartPole-v1"), Workers: 2, EnvsPerWorker: 4, Steps: 30, Seed: 3}, p)
	r, err := b.Collect(context.Background(), 30)
	if err != nil {
		t.Fatal(err)
	}
	d := openDataset(t, t.TempDir(), Run{Env: "CartPole-v1", Policy: "../testdata/mlp_tanh.onnx", Seed: 3}, false)
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

// failingWriter fails with ENOSPC after limit bytes, like a disk filling up.
type failingWriter struct {
	w     io.Writer
	limit int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n, _ := f.w.Write(p[:f.limit])
		f.limit = 0
		return n, syscall.ENOSPC
	}
	f.limit -= len(p)
	return f.w.Write(p)
}

// TestFullDiskLeavesOnlyCompleteShards: a shard that does not fit leaves the folder's shards
// and the manifest as they were (no partial or temporary file; a run whose first shard failed
// taken out of the manifest by Close, a folder made for it removed), and once there is room
// the next shard takes the failed one's number.
func TestFullDiskLeavesOnlyCompleteShards(t *testing.T) {
	for _, tc := range []struct {
		name    string
		earlier int // shards of an earlier, finished run in the folder
		before  int // shards this run writes before the disk fills
	}{
		{"a later shard", 0, 2},
		{"the first shard of an appended run", 1, 0},
		{"the first shard into a new folder", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tc.earlier > 0 {
				writeRun(t, dir, Run{Env: "CartPole-v1", Seed: 1}, false, tc.earlier, 5)
			}
			manifest, _ := os.ReadFile(filepath.Join(dir, ManifestName))
			b := newBatcher(t, batcher.Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 8, Steps: 50}, nil)
			d := openDataset(t, dir, Run{Env: "CartPole-v1"}, tc.earlier > 0)
			var want []string
			for n := range tc.earlier + tc.before {
				want = append(want, shardName(n))
			}
			for range tc.before {
				r, err := b.Collect(context.Background(), 50)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := d.Write(r); err != nil {
					t.Fatal(err)
				}
			}
			if tc.before > 0 {
				manifest, _ = os.ReadFile(filepath.Join(dir, ManifestName))
			}
			d.shards.wrap = func(w io.Writer) io.Writer { return &failingWriter{w: w, limit: 3000} }
			r, err := b.Collect(context.Background(), 50)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Write(r); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), shardName(len(want))+" not written") {
				t.Fatalf("write on a full disk: %v", err)
			}
			if got := shardFiles(t, dir); !slices.Equal(got, want) {
				t.Fatalf("folder holds %v, want only the complete shards %v", got, want)
			}
			if tc.before > 0 {
				if got := listedShards(t, dir); !slices.Equal(got, want) {
					t.Fatalf("manifest lists %v, want %v", got, want)
				}
				// Room again: the next shard takes the failed one's number.
				d.shards.wrap = nil
				path, err := d.Write(r)
				if err != nil || filepath.Base(path) != shardName(len(want)) {
					t.Fatalf("write once there is room: %s, %v", path, err)
				}
				return
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, ManifestName))
			if tc.earlier == 0 {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the folder made for a run without shards is left: %v", err)
				}
			} else if err != nil || !bytes.Equal(got, manifest) {
				t.Fatalf("the manifest changed (%v):\n%s\nwas\n%s", err, got, manifest)
			}
		})
	}
}

// TestWriteFailureItCannotUndo: when recording a shard fails and putting the manifest back
// fails too, Write says the shard is left, the Writer refuses further writes, and the next
// writer removes the shard the manifest does not list.
func TestWriteFailureItCannotUndo(t *testing.T) {
	dir := t.TempDir()
	b := newBatcher(t, batcher.Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 3, Steps: 5}, nil)
	d := openDataset(t, dir, Run{Env: "CartPole-v1"}, false)
	r, err := b.Collect(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Write(r); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, ManifestName)
	saved, _ := os.ReadFile(manifest)
	// While the shard is written, the manifest becomes a folder no file can be renamed over.
	d.shards.wrap = func(w io.Writer) io.Writer {
		os.Remove(manifest)
		os.MkdirAll(filepath.Join(manifest, "x"), 0o755)
		return w
	}
	_, err = d.Write(r)
	if err == nil || !strings.Contains(err.Error(), "shard-000001.npz not written") || !strings.Contains(err.Error(), "left for the next writer") {
		t.Fatalf("write: %v", err)
	}
	d.shards.wrap = nil
	if _, err := d.Write(r); err == nil || !strings.Contains(err.Error(), "no more shards go into") {
		t.Fatalf("write after it: %v", err)
	}
	if err := d.Finish(); err == nil || !strings.Contains(err.Error(), "no more shards go into") {
		t.Fatalf("finish after it: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := shardFiles(t, dir); strings.Join(got, ",") != "shard-000000.npz,shard-000001.npz" {
		t.Fatalf("folder holds %v", got)
	}
	// The disk recovers with the manifest as its last good write left it.
	os.RemoveAll(manifest)
	os.WriteFile(manifest, saved, 0o644)
	openDataset(t, dir, Run{Env: "CartPole-v1", Seed: 2}, true)
	if got, listed := shardFiles(t, dir), listedShards(t, dir); strings.Join(got, ",") != "shard-000000.npz" || !slices.Equal(got, listed) {
		t.Fatalf("after recovery the folder holds %v, the manifest lists %v", got, listed)
	}
}

func TestUnwritableOutput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	if _, err := openRun(filepath.Join(file, "out"), Run{Env: "CartPole-v1"}, false); err == nil || !strings.Contains(err.Error(), "output folder") {
		t.Fatalf("error %v", err)
	}
}
