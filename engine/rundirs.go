package engine

import "github.com/towerrl/towerrl/engine/rundir"

// ErrRunDir is wrapped by errors about a run directory that cannot be used: not empty, locked
// by another process, or holding another run's files.
var ErrRunDir = rundir.ErrRunDir

// runDir is a run's folder, its metrics lines being Metrics.
type runDir = rundir.Dir[Metrics]

// The files of a run directory, by their names in package rundir.
const (
	configFile  = rundir.ConfigFile
	metricsFile = rundir.MetricsFile
	policyFile  = rundir.PolicyFile
)

var checkpointFile = rundir.CheckpointFile
