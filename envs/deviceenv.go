package envs

import (
	"errors"
	"fmt"

	"github.com/towerrl/towerrl/device"
)

// DeviceEnv wraps a VecEnv so that its outputs are tensors on a device, for
// agents that run there (the rlstructures idea: one batcher with many envs
// feeding a GPU policy). On the CPU the tensors are the VecEnv's buffers
// themselves (zero copy, nothing to do per step); on a GPU each Reset and
// Step copies the buffers into device memory (the CUDA back end comes with
// the cuda build tag).
//
// A DeviceEnv owns its VecEnv (Close closes it) but not its device. Like a
// VecEnv it is not safe for concurrent use, and Step does not allocate.
type DeviceEnv struct {
	env VecEnv
	dev device.Device
	t   Tensors
	all [5]*device.Tensor // t's tensors, for Sync and CheckDevice
}

// Tensors are a DeviceEnv's outputs on its device, each mirroring the
// matching VecEnv buffer: Obs and FinalObs are [N, obs shape...], the others
// [N]. Terminated and Truncated hold 0 or 1.
type Tensors struct {
	Obs, Rewards, Terminated, Truncated, FinalObs *device.Tensor
}

// NewDeviceEnv places env's buffers on dev. The tensors are named "obs",
// "rewards", "terminated", "truncated" and "final_obs".
func NewDeviceEnv(env VecEnv, dev device.Device) (*DeviceEnv, error) {
	if env == nil || dev == nil {
		return nil, errors.New("envs: NewDeviceEnv needs a VecEnv and a device")
	}
	spec, n, b := env.Spec(), env.NumEnvs(), env.Buffers()
	obsShape := append([]int{n}, spec.Observation.Shape...)
	d := &DeviceEnv{env: env, dev: dev}
	for _, m := range []struct {
		dst   **device.Tensor
		name  string
		host  []float32
		shape []int
	}{
		{&d.t.Obs, "obs", b.Obs, obsShape},
		{&d.t.Rewards, "rewards", b.Rewards, []int{n}},
		{&d.t.Terminated, "terminated", b.Terminated, []int{n}},
		{&d.t.Truncated, "truncated", b.Truncated, []int{n}},
		{&d.t.FinalObs, "final_obs", b.FinalObs, obsShape},
	} {
		t, err := dev.Mirror(m.name, m.host, m.shape...)
		if err != nil {
			return nil, fmt.Errorf("envs: placing %s of %s on %v: %w", m.name, spec.ID, dev, err)
		}
		*m.dst = t
	}
	d.all = [5]*device.Tensor{d.t.Obs, d.t.Rewards, d.t.Terminated, d.t.Truncated, d.t.FinalObs}
	if err := device.CheckDevice(dev, d.all[:]...); err != nil {
		return nil, fmt.Errorf("envs: placing %s: %w", spec.ID, err)
	}
	return d, nil
}

// Spec describes the environment.
func (d *DeviceEnv) Spec() Spec { return d.env.Spec() }

// NumEnvs is the number of envs N.
func (d *DeviceEnv) NumEnvs() int { return d.env.NumEnvs() }

// Device is the device the tensors live on.
func (d *DeviceEnv) Device() device.Device { return d.dev }

// Env is the wrapped VecEnv; its Buffers are the host side of the tensors.
func (d *DeviceEnv) Env() VecEnv { return d.env }

// Tensors returns the output tensors. They stay the same for the life of
// the DeviceEnv; their contents change on every Reset and Step.
func (d *DeviceEnv) Tensors() Tensors { return d.t }

// Reset resets every env and brings the tensors up to date.
func (d *DeviceEnv) Reset() error {
	if err := d.env.Reset(); err != nil {
		return err
	}
	return d.sync()
}

// Step steps every env (see VecEnv.Step) and brings the tensors up to date.
func (d *DeviceEnv) Step(a Actions) error {
	if err := d.env.Step(a); err != nil {
		return err
	}
	return d.sync()
}

func (d *DeviceEnv) sync() error {
	for _, t := range d.all {
		if err := d.dev.Sync(t); err != nil {
			return fmt.Errorf("envs: syncing %s to %v: %w", t.Name(), d.dev, err)
		}
	}
	return nil
}

// Close closes the wrapped VecEnv. The device stays open.
func (d *DeviceEnv) Close() error { return d.env.Close() }
