//go:build !towerrl_cuda

package cudatower

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/ppo"
	"github.com/towerrl/towerrl/models"
	"github.com/towerrl/towerrl/models/head"
)

// TestWithoutCUDA: without the towerrl_cuda tag, a tower is an error wrapping
// device.ErrNoCUDA, which names the tag.
func TestWithoutCUDA(t *testing.T) {
	spec := head.Spec{Head: head.CategoricalKind, N: 2, ObsShape: []int{4}}
	params, err := models.NewParams(models.Config{Spec: spec}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Towers(params, &ppo.PPO{Coefs: coefs})(0, device.CPU(), 8, params.Data())
	if !errors.Is(err, device.ErrNoCUDA) {
		t.Fatalf("a tower without CUDA: %v, want device.ErrNoCUDA", err)
	}
	t.Log(err)
}
