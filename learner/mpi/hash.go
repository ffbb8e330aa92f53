package mpi

import (
	"cmp"
	"slices"
)

// compareHashes groups the ranks by the hash they hold (hashes[r] is rank r's): nil when every
// rank holds the same one, else a *MismatchError, the same on every rank that computes it from
// the same hashes.
func compareHashes(hashes [][32]byte) error {
	var groups []HashGroup
	for r, h := range hashes {
		i := slices.IndexFunc(groups, func(g HashGroup) bool { return g.Hash == h })
		if i < 0 {
			groups = append(groups, HashGroup{Hash: h})
			i = len(groups) - 1
		}
		groups[i].Ranks = append(groups[i].Ranks, r)
	}
	if len(groups) <= 1 {
		return nil
	}
	// Largest group first; ties by lowest rank (groups were made in rank order).
	slices.SortStableFunc(groups, func(a, b HashGroup) int { return cmp.Compare(len(b.Ranks), len(a.Ranks)) })
	return &MismatchError{Groups: groups}
}
