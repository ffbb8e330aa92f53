package dataset

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/towerrl/towerrl/batcher"
	"github.com/towerrl/towerrl/bind"
	"github.com/towerrl/towerrl/envs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// openRun is Open for run.Env's spec.
func openRun(dir string, run Run, appendRun bool) (*Writer, error) {
	spec, err := envs.Lookup(run.Env)
	if err != nil {
		return nil, err
	}
	return Open(dir, spec, run, appendRun)
}

func loadPolicy(t testing.TB, path string, env string, cfg bind.Config) *bind.Policy {
	t.Helper()
	model, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := envs.Lookup(env)
	if err != nil {
		t.Fatal(err)
	}
	p, err := bind.New(context.Background(), model, 0, spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newBatcher(t testing.TB, cfg batcher.Config, p *bind.Policy) *batcher.Batcher {
	t.Helper()
	b, err := batcher.New(context.Background(), cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}
