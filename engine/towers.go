package engine

import (
	"github.com/towerrl/towerrl/learner"
	"github.com/towerrl/towerrl/models"
)

// PPOTowers is the learner.TowerFactory of PPO's loss over params' architecture, for callers
// building their own learner.Towers (benchmarks, custom loops).
func PPOTowers(params *models.Params, loss Loss) learner.TowerFactory {
	return ppoTowerFactory(params, loss)
}
