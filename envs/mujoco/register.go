//go:build mujoco && cgo

package mujoco

import (
	"embed"
	"fmt"
	"math"
	"sync"

	"github.com/towerrl/towerrl/envs"
)

//go:embed assets/*.xml
var assets embed.FS

// Available reports whether this build has the MuJoCo envs.
func Available() bool { return true }

// Version is the MuJoCo library's version (mj_versionString).
func Version() string { return version() }

// def is one registered env: its spec, model file and task, and the model compiled on first
// use (once per process, shared by every VecEnv of the env).
type def struct {
	spec      envs.Spec
	file      string // under assets/
	frameSkip int
	rne       bool // the observation or reward reads cfrc_ext: mj_rnePostConstraint after the steps
	obsDim    int
	task      task
	// bind resolves the task's body indices once the model is compiled; nil when it needs none.
	bind  func(md *model) error
	model func() (*model, error)
}

// register registers d under its spec's id.
func register(d *def) {
	d.obsDim = d.spec.Observation.Dim()
	d.model = sync.OnceValues(func() (*model, error) {
		xml, err := assets.ReadFile("assets/" + d.file)
		if err != nil {
			return nil, err
		}
		md, err := loadModel(d.file, xml)
		if err != nil {
			return nil, err
		}
		md.dt = md.timestep * float64(d.frameSkip)
		if md.nu != d.spec.Action.Dim() {
			return nil, fmt.Errorf("%w: %s has %d actuators, the env %d action values", errMuJoCo, d.file, md.nu, d.spec.Action.Dim())
		}
		if d.bind != nil {
			if err := d.bind(md); err != nil {
				return nil, fmt.Errorf("%s: %w", d.file, err)
			}
		}
		return md, nil
	})
	byID[d.spec.ID] = d
	envs.RegisterNative(d.spec, func(n int) (envs.Dynamics, error) { return newSim(d, n) })
}

// spec is the envs.Spec of a v4 env: observations unbounded (Box(-inf, inf) as in Gymnasium),
// actions in [-bound, bound] per actuator (the model's ctrlrange).
func spec(id string, obsDim, actDim int, bound float32, limit int, threshold float64) envs.Spec {
	inf := float32(math.Inf(1))
	return envs.Spec{
		ID:              id,
		Observation:     envs.NewBox(-inf, inf, obsDim),
		Action:          envs.NewBox(-bound, bound, actDim),
		MaxEpisodeSteps: limit,
		RewardThreshold: threshold,
		EnvBytes:        envBytes,
	}
}

// envBytes bounds one env's mjData under MuJoCo 2.2.2 with these models (3.2 to 3.4 MB: its
// arena and stack), and its state and scratch in Go.
const envBytes = 4 << 20

// byID holds the registered defs by id (written by init functions only).
var byID = map[string]*def{}

// defs returns the def registered under id, or nil.
func defs(id string) *def { return byID[id] }
