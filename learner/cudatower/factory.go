package cudatower

import (
	"errors"

	"github.com/towerrl/towerrl/device"
	"github.com/towerrl/towerrl/engine/algo"
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// Towers is the learner.TowerFactory of alg's loss over params' MLP on CUDA devices
// (learner.TowersConfig.Devices holding device.CUDA's): each tower reads the model's own
// parameter vector, as the CPU towers of package engine do.
func Towers(params *models.Params, alg algo.Algorithm) learner.TowerFactory {
	return func(_ int, dev device.Device, rows int, flat []float32) (learner.Tower, error) {
		if len(flat) == 0 || len(flat) != params.Size() || &flat[0] != &params.Data()[0] {
			return nil, errors.New("cudatower: towers must read the model's own parameter vector")
		}
		return New(dev, params, rows, alg)
	}
}
