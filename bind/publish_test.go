package bind

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/towerrl/towerrl/bind/bindtest"
	"github.com/towerrl/towerrl/envs"
)

// TestPublishLayoutErrors: a layout (Config.Publish) that does not fit the graph is refused
// with ErrPublish naming the problem.
func TestPublishLayoutErrors(t *testing.T) {
	ctx := context.Background()
	spec, _ := envs.Lookup("CartPole-v1")
	model := bindtest.ConstPolicy(t, 0)
	for _, tc := range []struct {
		name   string
		layout []Param
		want   string
	}{
		{"unknown name", []Param{{"w", 0, 8}, {"w2", 8, 8}}, `"w2", which is neither an initializer`},
		{"an input", []Param{{"obs", 0, 4}}, `"obs", which is neither an initializer`},
		{"twice", []Param{{"w", 0, 8}, {"w", 8, 8}}, `names "w" twice`},
		{"no name", []Param{{"", 0, 8}}, "has no name"},
		{"wrong length", []Param{{"w", 0, 6}}, `"w" has shape [4 2] (8 values); the layout gives it 6`},
		{"negative offset", []Param{{"w", -1, 8}}, "offset -1"},
		{"empty", []Param{{"b", 0, 0}}, "length 0"},
		{"overlap", []Param{{"w", 0, 8}, {"b", 7, 2}}, "overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(ctx, model, 0, spec, Config{Publish: tc.layout})
			if !errors.Is(err, ErrPublish) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrPublish containing %q", err, tc.want)
			}
		})
	}

}
