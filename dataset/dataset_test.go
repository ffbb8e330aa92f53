package dataset

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/sbinet/npyio/npz"

	"github.com/towerrl/towerrl/batcher"
)

func openDataset(t *testing.T, dir string, run Run, appendRun bool) *Writer {
	t.Helper()
	d, err := openRun(dir, run, appendRun)
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

// writeRun writes n shards of rollouts of T steps of 3 random-policy CartPole envs and
// finishes the run.
func writeRun(t *testing.T, dir string, run Run, appendRun bool, n, steps int) *Writer {
	t.Helper()
	return writeShards(t, dir, run, appendRun, n, steps, true)
}

// writeShards is writeRun that finishes the run or not (a run stopped early).
func writeShards(t *testing.T, dir string, run Run, appendRun bool, n, steps int, finish bool) *Writer {
	t.Helper()
	b := newBatcher(t, batcher.Config{Env: envSpec(run.Env), EnvsPerWorker: 3, Steps: steps, Seed: run.Seed}, nil)
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
	if finish {
		if err := d.Finish(); err != nil {
			t.Fatal(err)
		}
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
	writeRun(t, dir, Run{Env: "CartPole-v1", Seed: 1}, false, 2, 5)
	before := snapshot(t, dir)
	_, err := openRun(dir, Run{Env: "CartPole-v1", Seed: 2}, false)
	if !errors.Is(err, ErrExists) {
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
	if _, err := openRun(old, Run{Env: "CartPole-v1"}, false); !errors.Is(err, ErrExists) ||
		!strings.Contains(err.Error(), "holds 3 shards (shard-000000.npz … shard-000002.npz); nothing") {
		t.Fatalf("folder of old shards: %v", err)
	}
	if _, err := openRun(old, Run{Env: "CartPole-v1"}, true); !errors.Is(err, ErrMismatch) ||
		!strings.Contains(err.Error(), "3 shards (shard-000000.npz … shard-000002.npz) that manifest.json does not describe") {
		t.Fatalf("append to old shards: %v", err)
	}

	// A folder with other files, but no dataset, is fine.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "README"), nil, 0o644)
	writeRun(t, other, Run{Env: "CartPole-v1"}, false, 1, 2)
}

// TestAppendContinuesAndRecords: --append numbers its shards after the folder's, leaves
// those untouched, and the manifest lists both runs with their shards and rows.
func TestAppendContinuesAndRecords(t *testing.T) {
	dir := t.TempDir()
	policy := "../testdata/mlp_tanh.onnx"
	writeRun(t, dir, Run{Env: "CartPole-v1", Seed: 1, Workers: 1, EnvsPerWorker: 3, Rollout: 5, Steps: 30}, false, 2, 5)
	before := snapshot(t, dir)
	start := time.Now().UTC()
	d := writeRun(t, dir, Run{Env: "CartPole-v1", Policy: policy, Seed: 2, Deterministic: true,
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
	want := []Run{
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
	writeRun(t, dir, Run{Env: "CartPole-v1", Seed: 1}, false, 1, 3)
	for _, tc := range []struct {
		name string
		run  Run
		want string
	}{
		{"other layout", Run{Env: "Pendulum-v1", Seed: 5},
			"run 1 of " + filepath.Join(dir, ManifestName) + " collected CartPole-v1 (observations [4], actions discrete:2); this run collects Pendulum-v1 (observations [3], actions box:1:-2:2)"},
		{"other env, same layout", Run{Env: "CartPoleNoVel-v1", Seed: 5}, "this run collects CartPoleNoVel-v1 (observations [4], actions discrete:2)"},
		{"same policy and seed", Run{Env: "CartPole-v1", Seed: 1}, "already collected with this policy (random, sha256 random), seed 1 and deterministic=false: this run would repeat its trajectories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, dir)
			_, err := openRun(dir, tc.run, true)
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
				t.Fatalf("refused append changed the folder:\n%s", diff)
			}
		})
	}
	// A shard the manifest lists that the folder lacks.
	os.Remove(filepath.Join(dir, "shard-000000.npz"))
	if _, err := openRun(dir, Run{Env: "CartPole-v1", Seed: 9}, true); !errors.Is(err, ErrMismatch) ||
		!strings.Contains(err.Error(), "lists shard-000000.npz, which the folder lacks") {
		t.Fatalf("missing shard: %v", err)
	}
}

// TestSecondWriterRefused reproduces the two batchers into one folder of defect 2: the second
// is refused, named the PID holding the lock (flock locks belong to open file descriptions,
// so two opens in one process exclude each other as two processes do).
func TestSecondWriterRefused(t *testing.T) {
	dir := t.TempDir()
	first := openDataset(t, dir, Run{Env: "CartPole-v1", Seed: 1}, false)
	for _, appendRun := range []bool{false, true} {
		_, err := openRun(dir, Run{Env: "CartPole-v1", Seed: 2}, appendRun)
		want := fmt.Sprintf("%s is locked by another writer, PID %d (%s)", dir, os.Getpid(), filepath.Join(dir, lockName))
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), want) {
			t.Fatalf("second writer (append %t): %v, want %q", appendRun, err, want)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the refused writer removed the folder: %v", err)
	}
	first.Close()
	writeRun(t, dir, Run{Env: "CartPole-v1", Seed: 2}, false, 1, 2)
}

// TestEmptyRunLeavesNoFolder: a run that writes no shard into a folder it made removes it,
// and leaves a folder it did not make without a manifest.
func TestEmptyRunLeavesNoFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "data")
	d := openDataset(t, dir, Run{Env: "CartPole-v1"}, false)
	if err := errors.Join(d.Finish(), d.Close(), d.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder left: %v", err)
	}
	dir = t.TempDir()
	d = openDataset(t, dir, Run{Env: "CartPole-v1"}, false)
	d.Close()
	if got := shardFiles(t, dir); len(got) != 0 {
		t.Fatalf("folder holds %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("manifest written for an empty run: %v", err)
	}
	writeRun(t, dir, Run{Env: "CartPole-v1"}, false, 1, 2) // still not a dataset
	if _, err := d.Write(&batcher.Rollout{}); err == nil {
		t.Fatal("Write after Close accepted")
	}
}

// tempName matches internal/atomicfile's temporary files, .NAME.tmp-DIGITS.
var tempName = regexp.MustCompile(`^\..+\.tmp-[0-9]+$`)

// unrecord rewrites dir's manifest as it was on disk just before its last shard was recorded
// (the last run without that shard, unfinished), which is what a writer killed between the
// shard's rename and the manifest's leaves: the shard is in the folder, unlisted.
func unrecord(t *testing.T, dir string) {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &m.Runs[len(m.Runs)-1]
	r.Shards, r.Complete = r.Shards[:len(r.Shards)-1], false
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// shardsPerRun says how many shards each run of m lists.
func shardsPerRun(m Manifest) []int {
	var n []int
	for _, r := range m.Runs {
		n = append(n, len(r.Shards))
	}
	return n
}

// TestLeftoversOfAKilledWriter: the next writer puts right what a writer killed at each step
// of a shard's commit leaves (its temporary files, a whole shard not yet recorded, a run
// recorded before its first shard), and what a writer of the version before atomicfile left
// (shard-NNNNNN.npz.tmp, manifest.json.tmp); it keeps the user's files and the recorded
// shards' bytes, and numbers on after the recorded shards.
func TestLeftoversOfAKilledWriter(t *testing.T) {
	write := func(t *testing.T, dir, name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half a file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(seed uint64) Run { return Run{Env: "CartPole-v1", Seed: seed} }
	for _, tc := range []struct {
		name   string
		killed func(t *testing.T, dir string) // leaves a killed writer's leftovers in dir
		want   string                         // the folder's files after recovery, besides the user's
		runs   []int                          // shards per run of the manifest after recovery
	}{
		{"shard written, not yet recorded", func(t *testing.T, dir string) {
			writeRun(t, dir, run(1), false, 2, 3)
			writeShards(t, dir, run(2), true, 2, 3, false)
			unrecord(t, dir)
			write(t, dir, ".manifest.json.tmp-4242") // the manifest's write under way
		}, "shard-000000.npz,shard-000001.npz,shard-000002.npz", []int{2, 1}},
		{"first shard written, not yet recorded", func(t *testing.T, dir string) {
			writeRun(t, dir, run(1), false, 2, 3)
			writeShards(t, dir, run(2), true, 1, 3, false)
			unrecord(t, dir)
		}, "shard-000000.npz,shard-000001.npz", []int{2}},
		{"first writer's first shard written, not yet recorded", func(t *testing.T, dir string) {
			writeShards(t, dir, run(1), false, 1, 3, false)
			unrecord(t, dir)
		}, "", nil},
		{"killed writing a shard", func(t *testing.T, dir string) {
			writeRun(t, dir, run(1), false, 2, 3)
			writeShards(t, dir, run(2), true, 1, 3, false)
			write(t, dir, ".shard-000003.npz.tmp-17")
		}, "shard-000000.npz,shard-000001.npz,shard-000002.npz", []int{2, 1}},
		{"killed writing its first shard", func(t *testing.T, dir string) {
			writeRun(t, dir, run(1), false, 2, 3)
			writeShards(t, dir, run(2), true, 1, 3, false)
			unrecord(t, dir)
			os.Remove(filepath.Join(dir, "shard-000002.npz"))
			write(t, dir, ".shard-000002.npz.tmp-2024")
		}, "shard-000000.npz,shard-000001.npz", []int{2}},
		{"previous version: listed shard not yet renamed", func(t *testing.T, dir string) {
			writeShards(t, dir, run(1), false, 2, 3, false)
			os.Rename(filepath.Join(dir, "shard-000001.npz"), filepath.Join(dir, "shard-000001.npz.tmp"))
			write(t, dir, ManifestName+".tmp")
		}, "shard-000000.npz,shard-000001.npz", []int{2}},
		{"previous version: shard not yet listed", func(t *testing.T, dir string) {
			writeShards(t, dir, run(1), false, 2, 3, false)
			write(t, dir, "shard-000002.npz.tmp")
			write(t, dir, "shard-000007.npz.tmp")
			write(t, dir, ManifestName+".tmp")
		}, "shard-000000.npz,shard-000001.npz", []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.killed(t, dir)
			mine := []string{".notes.tmp-draft", "mine.tmp", "shard-000000.npz.bak"}
			for _, n := range mine {
				write(t, dir, n)
			}
			recorded := map[string][]byte{}
			if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
				for _, n := range listedShards(t, dir) {
					recorded[n], _ = os.ReadFile(filepath.Join(dir, n))
					if recorded[n] == nil {
						recorded[n], _ = os.ReadFile(filepath.Join(dir, n+".tmp"))
					}
				}
			}

			// The next writer appends where there is a dataset, and starts one where not.
			d := openDataset(t, dir, run(9), len(tc.runs) > 0)
			want := slices.DeleteFunc(append(slices.Clone(mine), strings.Split(tc.want, ",")...), func(n string) bool { return n == "" })
			slices.Sort(want)
			if got := shardFiles(t, dir); !slices.Equal(got, want) {
				t.Fatalf("after recovery the folder holds %s, want %s", got, want)
			}
			m := d.Manifest()
			if got := shardsPerRun(m); !slices.Equal(got[:len(got)-1], tc.runs) || got[len(got)-1] != 0 {
				t.Fatalf("shards per run %v, want %v and this run's 0", got, tc.runs)
			}
			if len(tc.runs) == 0 {
				if _, err := os.Stat(filepath.Join(dir, ManifestName)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a manifest of no runs is left: %v", err)
				}
			} else if diff := cmp.Diff(tc.runs, shardsPerRun(*mustReadManifest(t, dir))); diff != "" {
				t.Fatalf("manifest on disk (-want +got):\n%s", diff)
			}
			if d.next != strings.Count(tc.want, ".npz") {
				t.Fatalf("next shard %d, want %d", d.next, strings.Count(tc.want, ".npz"))
			}
			for _, r := range m.Runs {
				for _, s := range r.Shards {
					if b, _ := os.ReadFile(filepath.Join(dir, s.Name)); !bytes.Equal(b, recorded[s.Name]) {
						t.Fatalf("recorded shard %s changed", s.Name)
					}
				}
			}
		})
	}
}

func mustReadManifest(t *testing.T, dir string) *Manifest {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUnrecordedShardsRefused: a shard the manifest does not list that is not the one a killed
// writer may leave (the next after the recorded ones, while the last run is unfinished) is
// the user's: it is kept and the append refused, the folder untouched.
func TestUnrecordedShardsRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish bool
		copyTo string
	}{
		{"next shard, last run finished", true, "shard-000002.npz"},
		{"a later shard, last run unfinished", false, "shard-000005.npz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeShards(t, dir, Run{Env: "CartPole-v1", Seed: 1}, false, 2, 3, tc.finish)
			b, _ := os.ReadFile(filepath.Join(dir, "shard-000000.npz"))
			os.WriteFile(filepath.Join(dir, tc.copyTo), b, 0o644)
			before := snapshot(t, dir)
			_, err := openRun(dir, Run{Env: "CartPole-v1", Seed: 2}, true)
			if want := "1 shard (" + tc.copyTo + ") that manifest.json does not describe"; !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
			if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
				t.Fatalf("the refused append changed the folder:\n%s", diff)
			}
		})
	}
}

// datasetChild is the body of a child process that writes shards into the folder
// TOWERRL_DATASET_CHILD names, with seed TOWERRL_DATASET_SEED, until it is killed; with
// TOWERRL_DATASET_DIE set it kills itself (SIGKILL) at that step of the commit of the shard
// after TOWERRL_DATASET_AFTER whole ones: "writing" halfway through the shard's bytes,
// "placed" once the shard is in place, before the manifest records it. It reports whether
// it ran (it is this process's body).
func datasetChild(t *testing.T) bool {
	dir := os.Getenv("TOWERRL_DATASET_CHILD")
	if dir == "" {
		return false
	}
	seed, _ := strconv.ParseUint(os.Getenv("TOWERRL_DATASET_SEED"), 10, 64)
	after, _ := strconv.Atoi(os.Getenv("TOWERRL_DATASET_AFTER"))
	b := newBatcher(t, batcher.Config{Env: envSpec("CartPole-v1"), EnvsPerWorker: 64, Steps: 20, Seed: seed}, nil)
	d, err := openRun(dir, Run{Env: "CartPole-v1", Seed: seed}, true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Println(childReady) // the run is in the manifest: a kill from now on is one the test means
	die := func() {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	for n := 0; ; n++ {
		if n == after {
			switch os.Getenv("TOWERRL_DATASET_DIE") {
			case "writing":
				d.shards.wrap = func(w io.Writer) io.Writer { return &killingWriter{w: w, left: 4000, die: die} }
			case "placed":
				d.shards.placed = func(string) { die() }
			}
		}
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

// killingWriter passes left bytes to w, then calls die.
type killingWriter struct {
	w    io.Writer
	left int
	die  func()
}

func (k *killingWriter) Write(p []byte) (int, error) {
	if len(p) >= k.left {
		k.w.Write(p[:k.left])
		k.die()
	}
	k.left -= len(p)
	return k.w.Write(p)
}

// startChild starts this test binary as datasetChild writing into dir.
func startChild(t *testing.T, test, dir string, seed int, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd, stderr := childCommand(test, dir, seed, env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stderr
}

// childCommand is the command that runs test as a child writer into dir, with seed and the
// extra environment env; its standard error goes to the buffer returned.
func childCommand(test, dir string, seed int, env ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$")
	cmd.Env = append(os.Environ(), append(env, "TOWERRL_DATASET_CHILD="+dir, "TOWERRL_DATASET_SEED="+strconv.Itoa(seed))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// childReady is the line a child writer prints on its standard output once its run is in the
// manifest.
const childReady = "towerrl dataset child: run recorded"

// startReadyChild is startChild, returning once the child has recorded its run (so that a
// kill after it finds the run in the manifest however slowly the loaded machine started the
// child), or failing after a minute.
func startReadyChild(t *testing.T, test, dir string, seed int) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd, stderr := childCommand(test, dir, seed)
	out, w, err := os.Pipe() // not StdoutPipe: the reader below may outlive cmd.Wait
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == childReady {
				ready <- true
				io.Copy(io.Discard, out) // keep draining, so the child never blocks on a full pipe
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatalf("child %d ended before recording its run:\n%s", seed, stderr)
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child %d did not record its run within a minute:\n%s", seed, stderr)
	}
	return cmd, stderr
}

// TestKillAtEachCommitStep kills a writer (a child process, SIGKILL) at each step of a shard's
// commit, for its first shard and a later one: the folder it leaves is the one the recovery
// expects (the run recorded before its first shard; a temporary file, or a whole shard the
// manifest does not list), and the next writer finds exactly the recorded shards, whole,
// numbers on after them, and drops a run that recorded none.
func TestKillAtEachCommitStep(t *testing.T) {
	if datasetChild(t) {
		return
	}
	for _, tc := range []struct {
		die   string
		after int // whole shards before the kill
	}{{"writing", 0}, {"writing", 2}, {"placed", 0}, {"placed", 2}} {
		t.Run(fmt.Sprintf("%s after %d", tc.die, tc.after), func(t *testing.T) {
			dir := t.TempDir()
			cmd, stderr := startChild(t, "TestKillAtEachCommitStep", dir, 1,
				"TOWERRL_DATASET_DIE="+tc.die, "TOWERRL_DATASET_AFTER="+strconv.Itoa(tc.after))
			if err := cmd.Wait(); !strings.Contains(fmt.Sprint(err), "killed") {
				t.Fatalf("child: %v\n%s", err, stderr)
			}
			// What the killed writer left: its run recorded with its whole shards, unfinished,
			// and the shard under way.
			m := mustReadManifest(t, dir)
			if len(m.Runs) != 1 || len(m.Runs[0].Shards) != tc.after || m.Runs[0].Complete {
				t.Fatalf("the killed writer's manifest: %+v", m.Runs)
			}
			var recorded []string
			for n := range tc.after {
				recorded = append(recorded, shardName(n))
			}
			files := shardFiles(t, dir)
			extra := slices.DeleteFunc(slices.Clone(files), func(n string) bool { return slices.Contains(recorded, n) })
			if len(extra) != 1 || len(files) != tc.after+1 ||
				tc.die == "writing" && !(tempName.MatchString(extra[0]) && strings.HasPrefix(extra[0], "."+shardName(tc.after)+".tmp-")) ||
				tc.die == "placed" && extra[0] != shardName(tc.after) {
				t.Fatalf("the killed writer left %v besides its %d recorded shards", extra, tc.after)
			}

			d := openDataset(t, dir, Run{Env: "CartPole-v1", Seed: 2}, tc.after > 0)
			if got := shardFiles(t, dir); !slices.Equal(got, recorded) {
				t.Fatalf("after recovery the folder holds %v, want %v", got, recorded)
			}
			if tc.after == 0 {
				if _, err := os.Stat(filepath.Join(dir, ManifestName)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the run that recorded no shard left a manifest: %v", err)
				}
			} else if got := listedShards(t, dir); !slices.Equal(got, recorded) {
				t.Fatalf("the manifest lists %v, want %v", got, recorded)
			}
			if d.next != tc.after {
				t.Fatalf("next shard %d, want %d", d.next, tc.after)
			}
			for _, n := range recorded {
				z, err := npz.Open(filepath.Join(dir, n))
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				z.Close()
			}
		})
	}
}

// TestKilledWriterLeavesAConsistentFolder SIGKILLs a child process writing shards at random
// moments; after each kill the next writer finds whole shards, exactly those the manifest
// lists, and no temporary file.
func TestKilledWriterLeavesAConsistentFolder(t *testing.T) {
	if datasetChild(t) {
		return
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	kills := 6
	if testing.Short() {
		kills = 3
	}
	for k := range kills {
		cmd, stderr := startReadyChild(t, "TestKilledWriterLeavesAConsistentFolder", dir, k+1)
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		if err := cmd.Wait(); !strings.Contains(fmt.Sprint(err), "killed") {
			t.Fatalf("child %d: %v\n%s", k, err, stderr)
		}
		// What the kill left besides the recorded shards: a temporary file, or an unrecorded shard.
		var recorded []string
		if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
			recorded = listedShards(t, dir)
		}
		left := slices.DeleteFunc(shardFiles(t, dir), func(n string) bool { return slices.Contains(recorded, n) })
		d := openDataset(t, dir, Run{Env: "CartPole-v1", Seed: 1000}, true)
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
