package envs_test

import (
	"testing"

	"github.com/towerrl/towerrl/envs"
	"github.com/towerrl/towerrl/envs/envtest"
)

func TestConformance(t *testing.T) {
	for _, id := range envs.IDs() {
		t.Run(id, func(t *testing.T) { envtest.Run(t, id) })
	}
}
