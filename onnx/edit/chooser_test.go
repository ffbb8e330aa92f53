package edit

import (
	"slices"
	"testing"
)

// TestChooserBackjumps searches four two-way decisions where only the first matters: a
// failure names decision 0 as its culprit, so the search changes it at once instead of
// enumerating the three decisions after it.
func TestChooserBackjumps(t *testing.T) {
	cases := []struct {
		name string
		// run takes the decisions' picks and returns nil on success, else the culprits.
		run      func(picks []int) []int
		want     []int // the picks that succeed; nil: none
		attempts int
	}{
		{"first decision matters", func(p []int) []int {
			if p[0] == 1 {
				return nil
			}
			return []int{0}
		}, []int{1, 0, 0, 0}, 2},
		{"first and last matter", func(p []int) []int {
			if p[0] == 1 && p[3] == 1 {
				return nil
			}
			return []int{0, 3}
		}, []int{1, 0, 0, 1}, 4},
		{"unknown culprits: every combination in order", func(p []int) []int {
			if slices.Equal(p, []int{1, 1, 0, 1}) {
				return nil
			}
			return []int{0, 1, 2, 3}
		}, []int{1, 1, 0, 1}, 14},
		{"certain failure", func(p []int) []int { return []int{} }, nil, 1},
		{"exhausted", func(p []int) []int { return []int{1} }, nil, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := &chooser{}
			for attempt := 1; attempt <= 100; attempt++ {
				picks := make([]int, 4)
				for k := range picks {
					picks[k], _ = ch.pick(2)
				}
				culprits := c.run(picks)
				if culprits == nil {
					if !slices.Equal(picks, c.want) || attempt != c.attempts {
						t.Fatalf("succeeded with %v on attempt %d, want %v on attempt %d", picks, attempt, c.want, c.attempts)
					}
					return
				}
				if !ch.next(culprits) {
					if c.want != nil || attempt != c.attempts {
						t.Fatalf("gave up on attempt %d, want success %v on attempt %d", attempt, c.want, c.attempts)
					}
					return
				}
			}
			t.Fatal("no end after 100 attempts")
		})
	}
}
