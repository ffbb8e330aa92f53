package mpi

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompareHashes(t *testing.T) {
	a, b, c := [32]byte{0xaa, 1}, [32]byte{0xbb, 2}, [32]byte{0xcc, 3}
	tests := []struct {
		name   string
		hashes [][32]byte
		groups [][]int // nil: no mismatch
		differ []int
		text   string
	}{
		{"one rank", [][32]byte{a}, nil, nil, ""},
		{"all equal", [][32]byte{a, a, a}, nil, nil, ""},
		{"rank 1 differs", [][32]byte{a, b, a}, [][]int{{0, 2}, {1}}, []int{1},
			"mpi: hashes differ between ranks: ranks 0, 2 have aa01000000000000…, rank 1 has bb02000000000000…; " +
				"rank 1 diverged (a non-deterministic update, different data or a missed update)"},
		{"rank 0 is the odd one", [][32]byte{b, a, a, a}, [][]int{{1, 2, 3}, {0}}, []int{0}, ""},
		{"tie: rank 0's group first", [][32]byte{b, a, a, b}, [][]int{{0, 3}, {1, 2}}, []int{1, 2}, ""},
		{"all differ", [][32]byte{c, b, a}, [][]int{{0}, {1}, {2}}, []int{1, 2}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := compareHashes(tc.hashes)
			if tc.groups == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
				t.Fatalf("got %v, want a *MismatchError", err)
			}
			var groups [][]int
			for _, g := range me.Groups {
				groups = append(groups, g.Ranks)
				for _, r := range g.Ranks {
					if tc.hashes[r] != g.Hash {
						t.Errorf("rank %d grouped under a hash it does not hold", r)
					}
				}
			}
			if diff := cmp.Diff(tc.groups, groups); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.differ, me.Differ()); diff != "" {
				t.Errorf("Differ (-want +got):\n%s", diff)
			}
			if tc.text != "" && err.Error() != tc.text {
				t.Errorf("message:\n got %s\nwant %s", err, tc.text)
			}
			if !strings.Contains(err.Error(), ranksText(tc.differ)+" diverged") {
				t.Errorf("message does not name the ranks that differ: %s", err)
			}
		})
	}
}
