package batcher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbinet/npyio/npz"
)

func openDataset(t *testing.T, dir string, run DatasetRun, appendRun bool) *Dataset {
	t.Helper()
	d, err := OpenDataset(dir, run, appendRun)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// shardFiles lists the folder's files other than the manifest and the lock, sorted.
func shardFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); n != ManifestName && n != lockName {
			names = append(names, n)
		}
	}
	return names
}

// listedShards reads manifest.json with encoding/json into a map (not Manifest) and lists
// its shards in order.
func listedShards(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Runs []struct {
			Shards []struct{ Name string }
		}
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range m.Runs {
		for _, s := range r.Shards {
			names = append(names, s.Name)
		}
	}
	return names
}

// writeRun writes n shards of rollouts of T steps of 3 random-policy CartPole envs.
func writeRun(t *testing.T, dir string, run DatasetRun, appendRun bool, n, steps int) *Dataset {
	t.Helper()
	b := newBatcher(t, Config{Env: run.Env, EnvsPerWorker: 3, Steps: steps, Seed: run.Seed}, nil)
	d := openDataset(t, dir, run, appendRun)
	for range n {
		r, err := b.Collect(context.Background(), steps)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return d
}

// snapshot reads every file of dir (the lock aside).
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, n := range append(shardFiles(t, dir), ManifestName) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err == nil {
			files[n] = b
		}
	}
	return files
}

// TestRerunRefused reproduces defect 2 of issue 13: a second run into a folder holding a
// dataset restarted at shard-000000 and replaced the first run's shards. It is refused now,
// the folder untouched.
func TestRerunRefused(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 1}, false, 2, 5)
	before := snapshot(t, dir)
	_, err := OpenDataset(dir, DatasetRun{Env: "CartPole-v1", Seed: 2}, false)
	if !errors.Is(err, ErrDatasetExists) {
		t.Fatalf("re-run: %v", err)
	}
	want := dir + " holds 2 shards (shard-000000.npz … shard-000001.npz) and manifest.json (1 run); nothing was written"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
	if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
		t.Fatalf("the refused run changed the folder (-before +after):\n%s", diff)
	}

	// Shards of an older batcher, without a manifest: refused too, and not appendable.
	old := t.TempDir()
	for _, n := range []string{"shard-000000.npz", "shard-000001.npz", "shard-000002.npz", "notes.txt"} {
		os.WriteFile(filepath.Join(old, n), []byte(n), 0o644)
	}
	if _, err := OpenDataset(old, DatasetRun{Env: "CartPole-v1"}, false); !errors.Is(err, ErrDatasetExists) ||
		!strings.Contains(err.Error(), "holds 3 shards (shard-000000.npz … shard-000002.npz); nothing") {
		t.Fatalf("folder of old shards: %v", err)
	}
	if _, err := OpenDataset(old, DatasetRun{Env: "CartPole-v1"}, true); !errors.Is(err, ErrDatasetMismatch) ||
		!strings.Contains(err.Error(), "3 shards (shard-000000.npz … shard-000002.npz) that manifest.json does not describe") {
		t.Fatalf("append to old shards: %v", err)
	}

	// A folder with other files, but no dataset, is fine.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "README"), nil, 0o644)
	writeRun(t, other, DatasetRun{Env: "CartPole-v1"}, false, 1, 2)
}

// TestAppendContinuesAndRecords: --append numbers its shards after the folder's, leaves
// those untouched, and the manifest lists both runs with their shards and rows.
func TestAppendContinuesAndRecords(t *testing.T) {
	dir := t.TempDir()
	policy := "../testdata/mlp_tanh.onnx"
	writeRun(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 1, Workers: 1, EnvsPerWorker: 3, Rollout: 5, Steps: 30}, false, 2, 5)
	before := snapshot(t, dir)
	start := time.Now().UTC()
	d := writeRun(t, dir, DatasetRun{Env: "CartPole-v1", Policy: policy, Seed: 2, Deterministic: true,
		Workers: 1, EnvsPerWorker: 3, Rollout: 4, Steps: 36}, true, 3, 4)
	for name, b := range before {
		if name != ManifestName && !bytes.Equal(b, snapshot(t, dir)[name]) {
			t.Fatalf("append changed %s", name)
		}
	}
	if got := shardFiles(t, dir); strings.Join(got, ",") != "shard-000000.npz,shard-000001.npz,shard-000002.npz,shard-000003.npz,shard-000004.npz" {
		t.Fatalf("folder holds %v", got)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.Manifest(), *m); diff != "" {
		t.Fatalf("manifest on disk differs from the writer's (-writer +disk):\n%s", diff)
	}
	model, _ := os.ReadFile(policy)
	sum := sha256.Sum256(model)
	abs, _ := filepath.Abs(policy)
	want := []DatasetRun{
		{Env: "CartPole-v1", Policy: "random", PolicySHA256: "random", Seed: 1, Workers: 1, EnvsPerWorker: 3, Rollout: 5, Steps: 30,
			Complete: true, Shards: []Shard{{"shard-000000.npz", 15}, {"shard-000001.npz", 15}}},
		{Env: "CartPole-v1", Policy: abs, PolicySHA256: hex.EncodeToString(sum[:]), Seed: 2, Deterministic: true,
			Workers: 1, EnvsPerWorker: 3, Rollout: 4, Steps: 36,
			Complete: true, Shards: []Shard{{"shard-000002.npz", 12}, {"shard-000003.npz", 12}, {"shard-000004.npz", 12}}},
	}
	for i := range want {
		want[i].ObservationShape, want[i].ActionSpace = []int{4}, "discrete:2"
		got := m.Runs[i]
		if got.Start.Before(start.Add(-time.Minute)) || got.End.Before(got.Start) {
			t.Errorf("run %d: start %v, end %v", i, got.Start, got.End)
		}
		got.Start, got.End = time.Time{}, time.Time{}
		if diff := cmp.Diff(want[i], got); diff != "" {
			t.Errorf("run %d (-want +got):\n%s", i, diff)
		}
	}
	// Each shard holds the rows the manifest says.
	for _, r := range m.Runs {
		for _, s := range r.Shards {
			z, err := npz.Open(filepath.Join(dir, s.Name))
			if err != nil {
				t.Fatal(err)
			}
			if rows := z.Header("rewards.npy").Descr.Shape[0]; rows != s.Rows {
				t.Errorf("%s: %d rows, manifest says %d", s.Name, rows, s.Rows)
			}
			z.Close()
		}
	}
}

func TestAppendRefusesAnotherDataset(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 1}, false, 1, 3)
	for _, tc := range []struct {
		name string
		run  DatasetRun
		want string
	}{
		{"other layout", DatasetRun{Env: "Pendulum-v1", Seed: 5},
			"run 1 of " + filepath.Join(dir, ManifestName) + " collected CartPole-v1 (observations [4], actions discrete:2); this run collects Pendulum-v1 (observations [3], actions box:1:-2:2)"},
		{"other env, same layout", DatasetRun{Env: "CartPoleNoVel-v1", Seed: 5}, "this run collects CartPoleNoVel-v1 (observations [4], actions discrete:2)"},
		{"same policy and seed", DatasetRun{Env: "CartPole-v1", Seed: 1}, "already collected with this policy (random, sha256 random), seed 1 and deterministic=false: this run would repeat its trajectories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, dir)
			_, err := OpenDataset(dir, tc.run, true)
			if !errors.Is(err, ErrDatasetMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
				t.Fatalf("refused append changed the folder:\n%s", diff)
			}
		})
	}
	// A shard the manifest lists that the folder lacks.
	os.Remove(filepath.Join(dir, "shard-000000.npz"))
	if _, err := OpenDataset(dir, DatasetRun{Env: "CartPole-v1", Seed: 9}, true); !errors.Is(err, ErrDatasetMismatch) ||
		!strings.Contains(err.Error(), "lists shard-000000.npz, which the folder lacks") {
		t.Fatalf("missing shard: %v", err)
	}
}

// TestSecondWriterRefused reproduces the two batchers into one folder of defect 2: the second
// is refused, named the PID holding the lock (flock locks belong to open file descriptions,
// so two opens in one process exclude each other as two processes do).
func TestSecondWriterRefused(t *testing.T) {
	dir := t.TempDir()
	first := openDataset(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 1}, false)
	for _, appendRun := range []bool{false, true} {
		_, err := OpenDataset(dir, DatasetRun{Env: "CartPole-v1", Seed: 2}, appendRun)
		want := fmt.Sprintf("%s is locked by another writer, PID %d (%s)", dir, os.Getpid(), filepath.Join(dir, lockName))
		if !errors.Is(err, ErrDatasetLocked) || !strings.Contains(err.Error(), want) {
			t.Fatalf("second writer (append %t): %v, want %q", appendRun, err, want)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the refused writer removed the folder: %v", err)
	}
	first.Close()
	writeRun(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 2}, false, 1, 2)
}

// TestEmptyRunLeavesNoFolder: a run that writes no shard into a folder it made removes it,
// and leaves a folder it did not make without a manifest.
func TestEmptyRunLeavesNoFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	d := openDataset(t, dir, DatasetRun{Env: "CartPole-v1"}, false)
	if err := errors.Join(d.Finish(), d.Close(), d.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder left: %v", err)
	}
	dir = t.TempDir()
	d = openDataset(t, dir, DatasetRun{Env: "CartPole-v1"}, false)
	d.Close()
	if got := shardFiles(t, dir); len(got) != 0 {
		t.Fatalf("folder holds %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("manifest written for an empty run: %v", err)
	}
	writeRun(t, dir, DatasetRun{Env: "CartPole-v1"}, false, 1, 2) // still not a dataset
	if _, err := d.Write(&Rollout{}); err == nil {
		t.Fatal("Write after Close accepted")
	}
}

// TestLeftoversOfAKilledWriter: the next writer removes incomplete .tmp files and finishes the
// rename of a shard the manifest lists (the kill fell between the manifest and the rename).
func TestLeftoversOfAKilledWriter(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 1}, false, 2, 3)
	last, _ := os.ReadFile(filepath.Join(dir, "shard-000001.npz"))
	os.Rename(filepath.Join(dir, "shard-000001.npz"), filepath.Join(dir, "shard-000001.npz.tmp"))
	for _, n := range []string{"shard-000002.npz.tmp", "shard-000007.npz.tmp", ManifestName + ".tmp"} {
		os.WriteFile(filepath.Join(dir, n), []byte("half a shard"), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "mine.tmp"), []byte("the user's"), 0o644)
	d := openDataset(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 2}, true)
	if got := strings.Join(shardFiles(t, dir), ","); got != "mine.tmp,shard-000000.npz,shard-000001.npz" {
		t.Fatalf("after recovery the folder holds %s", got)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "shard-000001.npz")); !bytes.Equal(b, last) {
		t.Fatal("the listed shard was not put back whole")
	}
	if d.next != 2 {
		t.Fatalf("next shard %d, want 2", d.next)
	}
}

// TestKilledWriterLeavesAConsistentFolder SIGKILLs a child process writing shards at random
// moments; after each kill the next writer finds whole shards, exactly those the manifest
// lists, and no .tmp file.
func TestKilledWriterLeavesAConsistentFolder(t *testing.T) {
	if dir := os.Getenv("TOWERRL_DATASET_CHILD"); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv("TOWERRL_DATASET_SEED"), 10, 64)
		b := newBatcher(t, Config{Env: "CartPole-v1", EnvsPerWorker: 64, Steps: 20, Seed: seed}, nil)
		d, err := OpenDataset(dir, DatasetRun{Env: "CartPole-v1", Seed: seed}, true)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		for {
			r, err := b.Collect(context.Background(), 20)
			if err == nil {
				_, err = d.Write(r)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(4)
			}
		}
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	kills := 6
	if testing.Short() {
		kills = 3
	}
	for k := range kills {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledWriterLeavesAConsistentFolder$")
		cmd.Env = append(os.Environ(), "TOWERRL_DATASET_CHILD="+dir, "TOWERRL_DATASET_SEED="+strconv.Itoa(k+1))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); !strings.Contains(fmt.Sprint(err), "killed") {
			t.Fatalf("child %d: %v\n%s", k, err, stderr.String())
		}
		left := shardFiles(t, dir)
		left = slices.DeleteFunc(left, func(n string) bool { return !strings.HasSuffix(n, tmpSuffix) })
		d := openDataset(t, dir, DatasetRun{Env: "CartPole-v1", Seed: 1000}, true)
		files := shardFiles(t, dir)
		listed := listedShards(t, dir)
		if !slices.Equal(files, listed) {
			t.Fatalf("kill %d: folder holds %v, manifest lists %v", k, files, listed)
		}
		m := d.Manifest()
		if len(m.Runs) != k+2 {
			t.Fatalf("kill %d: manifest of %d runs", k, len(m.Runs))
		}
		killed := m.Runs[k] // the child's run; the earlier ones were checked after their kills
		for _, s := range killed.Shards {
			z, err := npz.Open(filepath.Join(dir, s.Name))
			if err != nil {
				t.Fatalf("kill %d: %s: %v", k, s.Name, err)
			}
			var rewards []float32
			if err := z.Read("rewards.npy", &rewards); err != nil || len(rewards) != s.Rows {
				t.Fatalf("kill %d: %s: %d rewards (%v), manifest says %d", k, s.Name, len(rewards), err, s.Rows)
			}
			z.Close()
		}
		t.Logf("kill %d: %d shards, %d by the killed writer; it left %v", k, len(files), len(killed.Shards), left)
		d.Close()
	}
}
