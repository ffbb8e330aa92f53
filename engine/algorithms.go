package engine

// The algorithms the engine ships: each registers itself with package engine/algo. Another
// program adds its own with a blank import of its package.
import (
	_ "github.com/towerrl/towerrl/engine/appo"
	_ "github.com/towerrl/towerrl/engine/impala"
	_ "github.com/towerrl/towerrl/engine/ppo"
)
