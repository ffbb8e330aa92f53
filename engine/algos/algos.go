// Package algos links the learning algorithms towerrl ships: each registers itself with
// package engine/algo (ppo and ddppo, impala, appo; the off-policy dqn and sac). The engine names no algorithm, so a
// program that trains (cmd/train, the engine's own tests) imports this package for its side
// effect, and adds an algorithm of its own with a blank import of that algorithm's package.
package algos

import (
	_ "github.com/towerrl/towerrl/engine/appo"
	_ "github.com/towerrl/towerrl/engine/dqn"
	_ "github.com/towerrl/towerrl/engine/impala"
	_ "github.com/towerrl/towerrl/engine/ppo"
	_ "github.com/towerrl/towerrl/engine/sac"
)
