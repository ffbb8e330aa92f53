package device_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/device/devicetest"
)

func TestCPUConformance(t *testing.T) {
	devicetest.Run(t, device.CPU())
}

func TestOpen(t *testing.T) {
	tests := []struct {
		spec    string
		want    string // device String, "" if an error is expected
		errPart string
	}{
		{"cpu", "cpu", ""},
		{"cpu:0", "cpu", ""},
		{"cpu:1", "", "one CPU device"},
		{"cuda:x", "", "not a non-negative integer"},
		{"tpu", "", "known: cpu, cuda"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			d, err := device.Open(tt.spec)
			if tt.want != "" {
				if err != nil || d.String() != tt.want {
					t.Fatalf("Open(%q) = %v, %v; want %s", tt.spec, d, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errPart) {
				t.Fatalf("Open(%q) error = %v, want one containing %q", tt.spec, err, tt.errPart)
			}
		})
	}
}

func TestRegisterDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("registering cpu twice did not panic")
		}
	}()
	device.Register("cpu", func(int) (device.Device, error) { return device.CPU(), nil })
}

// fakeGPU is a fake non-CPU device used to exercise CheckDevice.
type fakeGPU struct{ device.Device }

func (fakeGPU) Kind() device.Kind { return device.KindCUDA }
func (fakeGPU) String() string    { return "cuda:0" }

func TestCheckDeviceNamesTensor(t *testing.T) {
	obs, err := device.CPU().Mirror("obs", make([]float32, 4), 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := device.CheckDevice(device.CPU(), obs); err != nil {
		t.Fatalf("CheckDevice(cpu, obs on cpu) = %v", err)
	}
	err = device.CheckDevice(fakeGPU{device.CPU()}, obs)
	if !errors.Is(err, device.ErrPlacement) || !strings.Contains(err.Error(), `"obs"`) {
		t.Fatalf("CheckDevice(cuda, obs on cpu) = %v, want ErrPlacement naming obs", err)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = device.CheckDevice(device.CPU(), obs, obs) }); allocs != 0 {
		t.Errorf("CheckDevice allocates %v times, want 0", allocs)
	}
}

func ExampleCheckDevice() {
	host := []float32{1, 2, 3, 4, 5, 6}
	obs, err := device.CPU().Mirror("obs", host, 2, 3)
	if err != nil {
		panic(err)
	}
	host[0] = 7 // a CPU tensor is its host slice: no copy, no Sync needed
	data, _ := obs.Host()
	fmt.Println(obs, data[0], device.CheckDevice(device.CPU(), obs))
	// Output: obs[2 3]@cpu 7 <nil>
}

func ExampleOpen() {
	_, err := device.Open("cuda:0")
	fmt.Println(errors.Is(err, device.ErrNoCUDA))
	// Output: true
}
