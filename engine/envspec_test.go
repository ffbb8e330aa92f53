package engine

import "github.com/towerrl/towerrl/envs"

// envSpec is the registered spec of the env id, which a test names: a run or a tool resolves
// it once where it starts and passes the spec down (batcher.Config.Env).
func envSpec(id string) envs.Spec {
	spec, err := envs.Lookup(id)
	if err != nil {
		panic(err) // a test's own typo
	}
	return spec
}
