package cli

import (
	"flag"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/models/head"
	"go.uber.org/zap"
)

// TestPolicyFlags: the foreign-policy flags become the batcher's overrides; bad values are
// refused naming the flag.
func TestPolicyFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(t *testing.T, f *PolicyFlags)
		err   string
	}{
		{args: nil, check: func(t *testing.T, f *PolicyFlags) {
			cfg, err := f.Config(zap.NewNop())
			if err != nil || cfg.Spec != nil || cfg.Head != "" || cfg.ActionScale != "" || cfg.Names != (head.Names{}) {
				t.Errorf("no flags: %+v, %v", cfg, err)
			}
		}},
		{args: []string{"--head", "tanh-gaussian", "--action-scale", "none", "--actions-output", "31", "--logits-output", "/actor/mu/Gemm_output_0"},
			check: func(t *testing.T, f *PolicyFlags) {
				cfg, err := f.Config(zap.NewNop())
				if err != nil || cfg.Head != head.TanhGaussianKind || cfg.Spec != nil || cfg.ActionScale != head.ScaleNone ||
					cfg.Names != (head.Names{Params: "/actor/mu/Gemm_output_0", Actions: "31"}) {
					t.Errorf("%+v, %v", cfg, err)
				}
			}},
		{args: []string{"--head", "gaussian", "--action-space", "box:1:-2:2"}, check: func(t *testing.T, f *PolicyFlags) {
			cfg, err := f.Config(zap.NewNop())
			if err != nil || cfg.Spec == nil || cfg.Spec.Head != head.GaussianKind || cfg.Spec.ActionSpace() != "box:1:-2:2" {
				t.Errorf("%+v, %v", cfg, err)
			}
		}},
		{args: []string{"--head", "softmax"}, err: `--head "softmax"`},
		{args: []string{"--action-scale", "half"}, err: "--action-scale"},
		{args: []string{"--head", "gaussian", "--action-scale", "none"}, err: "tanh-gaussian"},
		{args: []string{"--device", "tpu"}, err: "--device"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			var f PolicyFlags
			f.Register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, &f)
				return
			}
			if _, err := f.Config(zap.NewNop()); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one naming %s", err, tc.err)
			}
		})
	}
}
