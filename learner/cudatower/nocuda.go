//go:build !towerrl_cuda

package cudatower

import (
	"fmt"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// New builds a tower of rows rows of alg's loss over params' MLP on the CUDA device dev,
// reading params.Data() in place. This build has no CUDA support: it always returns an error
// wrapping device.ErrNoCUDA (build with -tags towerrl_cuda).
func New(dev device.Device, params *models.Params, rows int, alg algo.Algorithm) (learner.Tower, error) {
	return nil, fmt.Errorf("cudatower: a tower on %v: %w", dev, device.ErrNoCUDA)
}
