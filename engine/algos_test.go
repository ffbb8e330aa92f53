package engine

// The engine's tests train with the algorithms towerrl ships, which the engine itself does
// not link.
import _ "github.com/towerrl/towerrl/engine/algos"
