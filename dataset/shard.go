package dataset

import (
	"archive/zip"
	"io"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/internal/atomicfile"
	"github.com/towerrl/towerrl/internal/npy"
)

// shardWriter encodes rollouts as .npz shards readable by numpy.load, with D4RL-style keys:
// observations, actions, rewards, terminals, timeouts, next_observations, plus logp, values
// and policy_version, and, for a simulated env (MuJoCo), D4RL's infos/qpos and infos/qvel
// (float64, the state each observation was read from). Rows are env-major (row i·T+t is env i's step t), so each env's
// trajectory segment is contiguous; actions are the ones the envs took (int64 indices for a
// Discrete space, float32 rows clipped to a Box's bounds). A [Writer] names the files and
// records them; a shardWriter belongs to one goroutine and reuses its scratch buffers from
// shard to shard.
type shardWriter struct {
	// Test hooks, nil otherwise: wrap wraps the file being written (a failing writer, a kill
	// halfway); placed runs once a shard is in place, before the Writer records it.
	wrap   func(io.Writer) io.Writer
	placed func(path string)
	// scratch buffers, reused from shard to shard
	f32, f32b []float32
	f64       []float64
	b1, b2    []bool
	i64       []int64
}

// writeFile writes r as a whole shard at path with internal/atomicfile: the file appears
// whole and synced, or not at all.
func (w *shardWriter) writeFile(path string, r *batcher.Rollout) error {
	err := atomicfile.Write(path, 0o644, func(f io.Writer) error {
		if w.wrap != nil {
			f = w.wrap(f)
		}
		return w.encode(f, r)
	})
	if err == nil && w.placed != nil {
		w.placed(path)
	}
	return err
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (w *shardWriter) encode(out io.Writer, r *batcher.Rollout) error {
	z := zip.NewWriter(out)
	rows := r.T * r.N
	obsShape := append([]int{rows}, r.ObsShape...)
	put := func(name string, write func(io.Writer) error) error {
		// numpy.load reads stored (uncompressed) members, as numpy.savez writes them.
		f, err := z.CreateHeader(&zip.FileHeader{Name: name + ".npy", Method: zip.Store})
		if err != nil {
			return err
		}
		return write(f)
	}
	// envMajor copies a time-major [T×N×width] column into env-major order.
	envMajor := func(dst, src []float32, width int) []float32 {
		dst = grow(dst, rows*width)
		for i := range r.N {
			for t := range r.T {
				copy(dst[(i*r.T+t)*width:(i*r.T+t+1)*width], src[(t*r.N+i)*width:(t*r.N+i+1)*width])
			}
		}
		return dst
	}
	w.f32 = envMajor(w.f32, r.Obs, r.ObsDim)
	if err := put("observations", func(f io.Writer) error { return npy.Write(f, obsShape, w.f32) }); err != nil {
		return err
	}
	w.f32b = grow(w.f32b, rows*r.ObsDim)
	for i := range r.N {
		for t := range r.T {
			copy(w.f32b[(i*r.T+t)*r.ObsDim:], r.NextObs(t, i))
		}
	}
	if err := put("next_observations", func(f io.Writer) error { return npy.Write(f, obsShape, w.f32b) }); err != nil {
		return err
	}
	if r.Discrete {
		w.f32 = envMajor(w.f32, r.EnvActions, 1)
		w.i64 = grow(w.i64, rows)
		for k, a := range w.f32[:rows] {
			w.i64[k] = int64(a)
		}
		if err := put("actions", func(f io.Writer) error { return npy.Write(f, []int{rows}, w.i64) }); err != nil {
			return err
		}
	} else {
		w.f32 = envMajor(w.f32, r.EnvActions, r.ActDim)
		if err := put("actions", func(f io.Writer) error { return npy.Write(f, []int{rows, r.ActDim}, w.f32) }); err != nil {
			return err
		}
	}
	for _, col := range []struct {
		name string
		src  []float32
	}{{"rewards", r.Rewards}, {"logp", r.LogP}, {"values", r.Values}} {
		w.f32 = envMajor(w.f32, col.src, 1)
		if err := put(col.name, func(f io.Writer) error { return npy.Write(f, []int{rows}, w.f32[:rows]) }); err != nil {
			return err
		}
	}
	w.b1, w.b2, w.i64 = grow(w.b1, rows), grow(w.b2, rows), grow(w.i64, rows)
	for i := range r.N {
		for t := range r.T {
			src, dst := t*r.N+i, i*r.T+t
			w.b1[dst], w.b2[dst], w.i64[dst] = r.Terminated[src] != 0, r.Truncated[src] != 0, r.Version[src]
		}
	}
	for _, col := range []struct {
		name  string
		src   []float64
		width int
	}{{"infos/qpos", r.QPos, r.NQ}, {"infos/qvel", r.QVel, r.NV}} {
		if col.src == nil {
			continue
		}
		w.f64 = grow(w.f64, rows*col.width)
		for i := range r.N {
			for t := range r.T {
				copy(w.f64[(i*r.T+t)*col.width:(i*r.T+t+1)*col.width], col.src[(t*r.N+i)*col.width:(t*r.N+i+1)*col.width])
			}
		}
		if err := put(col.name, func(f io.Writer) error { return npy.Write(f, []int{rows, col.width}, w.f64) }); err != nil {
			return err
		}
	}
	for _, col := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{"terminals", func(f io.Writer) error { return npy.Write(f, []int{rows}, w.b1) }},
		{"timeouts", func(f io.Writer) error { return npy.Write(f, []int{rows}, w.b2) }},
		{"policy_version", func(f io.Writer) error { return npy.Write(f, []int{rows}, w.i64) }},
	} {
		if err := put(col.name, col.write); err != nil {
			return err
		}
	}
	return z.Close()
}
