package engine

import (
	"fmt"
	"sync"

	"github.com/towerrl/towerrl/internal/kernels"
)

// The precision of the matrix products (Config.MatmulPrecision) is the process's: package
// internal/kernels holds one setting for every product. Runs of one precision may overlap in a
// process; a run of the other is refused while any goes on, so that no run computes at a
// precision it did not ask for.
var precisionState struct {
	sync.Mutex
	runs int // runs going on, all at kernels.GetPrecision()
}

// parsePrecision reads Config.MatmulPrecision.
func parsePrecision(name string) (kernels.Precision, error) {
	p, err := kernels.ParsePrecision(name)
	if err != nil {
		return p, fmt.Errorf("%w: MatmulPrecision %q: want float32 (the default) or bf16", ErrConfig, name)
	}
	return p, nil
}

// precisionName is name as config.json keeps it: float32, the default, as "" (a run that did
// not name it). Train (withDefaults) and a resume's change (readRun) both write it so, so that
// naming the default is no change.
func precisionName(name string) string {
	if name == kernels.Float32.String() {
		return ""
	}
	return name
}

// usePrecision sets the products' precision for a run, until release.
func usePrecision(name string) (release func(), err error) {
	p, err := parsePrecision(name)
	if err != nil {
		return nil, err
	}
	s := &precisionState
	s.Lock()
	defer s.Unlock()
	if cur := kernels.GetPrecision(); s.runs > 0 && cur != p {
		return nil, fmt.Errorf("%w: MatmulPrecision %s while another run in this process trains with %s products: the precision is the process's; run them in separate processes",
			ErrConfig, p, cur)
	}
	if s.runs == 0 {
		kernels.SetPrecision(p)
	}
	s.runs++
	return func() {
		s.Lock()
		defer s.Unlock()
		if s.runs--; s.runs == 0 {
			kernels.SetPrecision(kernels.Float32)
		}
	}, nil
}

// BF16Available is whether this machine runs MatmulPrecision bf16's products in bfloat16 (a
// CPU with Intel AMX-BF16, and an OS that grants its tile state); elsewhere they stay float32.
func BF16Available() bool { return kernels.HasBF16() }
