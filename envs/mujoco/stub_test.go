//go:build !(mujoco && cgo)

package mujoco

import (
	"errors"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/envs"
)

// Without MuJoCo the ids are known, and asking for one says what to install.
func TestUnavailable(t *testing.T) {
	if Available() {
		t.Fatal("Available() in a build without MuJoCo")
	}
	for _, id := range IDs {
		_, err := envs.Make(id, envs.Config{})
		if !errors.Is(err, envs.ErrUnavailable) || !strings.Contains(err.Error(), "apt-get install libmujoco-dev") {
			t.Errorf("Make(%q) = %v, want ErrUnavailable saying how to install MuJoCo", id, err)
		}
		if _, err := envs.Lookup(id); !errors.Is(err, envs.ErrUnavailable) {
			t.Errorf("Lookup(%q) = %v", id, err)
		}
	}
	if _, err := envs.Make("HalfCheetah-v9", envs.Config{}); !errors.Is(err, envs.ErrUnknownEnv) {
		t.Errorf("an unknown id: %v", err)
	}
}
