package envs_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/envs"
)

func TestDeviceEnvCPUIsZeroCopy(t *testing.T) {
	v, err := envs.Make("CartPole-v1", envs.Config{NumEnvs: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := envs.NewDeviceEnv(v, device.CPU())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	ts, b := d.Tensors(), v.Buffers()
	for _, c := range []struct {
		t     *device.Tensor
		buf   []float32
		shape []int
	}{
		{ts.Obs, b.Obs, []int{16, 4}},
		{ts.Rewards, b.Rewards, []int{16}},
		{ts.Terminated, b.Terminated, []int{16}},
		{ts.Truncated, b.Truncated, []int{16}},
		{ts.FinalObs, b.FinalObs, []int{16, 4}},
	} {
		data, ok := c.t.Host()
		if !ok || &data[0] != &c.buf[0] || len(data) != len(c.buf) {
			t.Errorf("tensor %v does not alias its VecEnv buffer", c.t)
		}
		if !slices.Equal(c.t.Shape(), c.shape) {
			t.Errorf("tensor %v: shape %v, want %v", c.t, c.t.Shape(), c.shape)
		}
	}
	if err := device.CheckDevice(device.CPU(), ts.Obs, ts.Rewards, ts.Terminated, ts.Truncated, ts.FinalObs); err != nil {
		t.Error(err)
	}
	a := envs.Actions{Discrete: make([]int, 16)}
	if allocs := testing.AllocsPerRun(200, func() {
		if err := d.Step(a); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("DeviceEnv.Step allocates %v times per call, want 0", allocs)
	}
}

// fakeGPU is a device whose memory is separate from the host: Sync copies.
type fakeGPU struct {
	mem map[*device.Tensor][2][]float32 // tensor → {host, device memory}
}

func (g *fakeGPU) Kind() device.Kind { return device.KindCUDA }
func (g *fakeGPU) Ordinal() int      { return 0 }
func (g *fakeGPU) String() string    { return "cuda:0" }
func (g *fakeGPU) Close() error      { return nil }
func (g *fakeGPU) Mirror(name string, host []float32, shape ...int) (*device.Tensor, error) {
	t, err := device.NewTensor(g, name, host, shape...)
	if err != nil {
		return nil, err
	}
	g.mem[t] = [2][]float32{host, make([]float32, len(host))}
	return t, nil
}
func (g *fakeGPU) Sync(t *device.Tensor) error {
	m, ok := g.mem[t]
	if !ok {
		return device.ErrForeign
	}
	copy(m[1], m[0])
	return nil
}

func TestDeviceEnvSyncsOtherDevices(t *testing.T) {
	v, err := envs.Make("Pendulum-v1", envs.Config{NumEnvs: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	gpu := &fakeGPU{mem: map[*device.Tensor][2][]float32{}}
	d, err := envs.NewDeviceEnv(v, gpu)
	if err != nil {
		t.Fatal(err)
	}
	ts := d.Tensors()
	if _, ok := ts.Obs.Host(); ok {
		t.Error("a GPU tensor claims host memory")
	}
	if err := device.CheckDevice(device.CPU(), ts.Obs); !errors.Is(err, device.ErrPlacement) {
		t.Errorf("CheckDevice(cpu, obs on cuda:0) = %v, want ErrPlacement", err)
	}
	if err := d.Reset(); err != nil {
		t.Fatal(err)
	}
	for step := range 3 {
		if step > 0 {
			if err := d.Step(envs.Actions{Box: []float32{1, -1, 0.5, 2}}); err != nil {
				t.Fatal(err)
			}
		}
		b := v.Buffers()
		if !slices.Equal(gpu.mem[ts.Obs][1], b.Obs) || !slices.Equal(gpu.mem[ts.Rewards][1], b.Rewards) {
			t.Fatalf("step %d: device memory not synced with the VecEnv buffers", step)
		}
	}
	// A bad action leaves the device tensors as they were.
	if err := d.Step(envs.Actions{Box: []float32{1}}); !errors.Is(err, envs.ErrAction) {
		t.Errorf("bad action: %v, want ErrAction", err)
	}
}

func ExampleNewDeviceEnv() {
	v, err := envs.Make("CartPole-v1", envs.Config{NumEnvs: 2, Seed: 1})
	if err != nil {
		panic(err)
	}
	d, err := envs.NewDeviceEnv(v, device.CPU())
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if err := d.Reset(); err != nil {
		panic(err)
	}
	if err := d.Step(envs.Actions{Discrete: []int{0, 1}}); err != nil {
		panic(err)
	}
	obs := d.Tensors().Obs
	fmt.Println(obs, device.CheckDevice(device.CPU(), obs))
	// Output: obs[2 4]@cpu <nil>
}
