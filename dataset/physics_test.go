//go:build mujoco && cgo

package dataset

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sbinet/npyio/npz"

	"github.com/towerrl/towerrl/envs"
	_ "github.com/towerrl/towerrl/envs/mujoco"

	"github.com/towerrl/towerrl/batcher"
)

// A MuJoCo env's shards carry D4RL's infos/qpos and infos/qvel: the state each observation was
// read from. Setting a fresh env to a row's qpos and qvel (Gymnasium's set_state) gives that
// row's observation back, bit for bit.
func TestShardsCarryQposQvel(t *testing.T) {
	const id = "Hopper-v4" // observation: qpos[1:], clip(qvel, ±10)
	b := newBatcher(t, batcher.Config{Env: envSpec(id), Workers: 2, EnvsPerWorker: 2, Steps: 40, Seed: 3}, nil)
	r, err := b.Collect(context.Background(), 40)
	if err != nil {
		t.Fatal(err)
	}
	d := openDataset(t, t.TempDir(), Run{Env: id, Seed: 3}, false)
	path, err := d.Write(r)
	if err != nil {
		t.Fatal(err)
	}
	z, err := npz.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	keys := z.Keys()
	if !slices.Contains(keys, "infos/qpos.npy") || !slices.Contains(keys, "infos/qvel.npy") {
		t.Fatalf("keys %s: no infos/qpos or infos/qvel", strings.Join(keys, ","))
	}
	rows := r.T * r.N
	if h := z.Header("infos/qpos.npy"); h.Descr.Type != "<f8" || !slices.Equal(h.Descr.Shape, []int{rows, 6}) {
		t.Fatalf("infos/qpos header %+v, want <f8 [%d 6]", h.Descr, rows)
	}
	var qpos, qvel []float64
	var obs []float32
	for name, dst := range map[string]any{"infos/qpos.npy": &qpos, "infos/qvel.npy": &qvel, "observations.npy": &obs} {
		if err := z.Read(name, dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	v, err := envs.Make(id, envs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	v.Reset()
	ph, _ := envs.PhysicsOf(v)
	moved := false
	for k := range rows {
		if err := ph.SetState(0, qpos[k*6:(k+1)*6], qvel[k*6:(k+1)*6]); err != nil {
			t.Fatal(err)
		}
		if got, want := v.Buffers().Obs, obs[k*11:(k+1)*11]; !slices.Equal(got, want) {
			t.Fatalf("row %d: the observation of its qpos and qvel is %v, the shard's %v", k, got, want)
		}
		moved = moved || qpos[k*6] != qpos[0]
	}
	if !moved {
		t.Error("every row holds the same x: the state was not recorded step by step")
	}
}

// Classic envs have no physical state: their shards keep the plain keys.
func TestShardsOfClassicEnvsHaveNoQpos(t *testing.T) {
	b := newBatcher(t, batcher.Config{Env: envSpec("CartPole-v1"), Workers: 1, EnvsPerWorker: 2, Steps: 5, Seed: 1}, nil)
	r, err := b.Collect(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.QPos != nil || r.QVel != nil {
		t.Fatal("a CartPole rollout holds qpos")
	}
}
