//go:build !(mujoco && cgo)

package mujoco

import "github.com/towerrl/towerrl/envs"

func init() {
	for _, id := range IDs {
		envs.RegisterUnavailable(id, ErrNotBuilt)
	}
}

// Available reports whether this build has the MuJoCo envs.
func Available() bool { return false }

// Version is the MuJoCo library's version, or "" in a build without it.
func Version() string { return "" }
