// Package names finds the names nearest to a misspelt or unknown one, for error messages that
// say what the user may have meant (a config field, a tensor of a graph).
package names

import (
	"slices"
	"strings"
)

// Nearest returns up to k of names closest to name, compared case-insensitively: those
// containing it or contained in it first, then those sharing the longest prefix with it
// (exporters name tensors by module path), then by edit distance. Ties keep names' order.
func Nearest(name string, names []string, k int) []string {
	type cand struct {
		name             string
		contains         bool
		prefix, distance int
	}
	lower := strings.ToLower(name)
	cs := make([]cand, 0, len(names))
	for _, n := range names {
		ln := strings.ToLower(n)
		c := cand{name: n, distance: Distance(lower, ln)}
		c.contains = lower != "" && (strings.Contains(ln, lower) || strings.Contains(lower, ln))
		for c.prefix < min(len(ln), len(lower)) && ln[c.prefix] == lower[c.prefix] {
			c.prefix++
		}
		cs = append(cs, c)
	}
	slices.SortStableFunc(cs, func(a, b cand) int {
		switch {
		case a.contains != b.contains:
			if a.contains {
				return -1
			}
			return 1
		case a.prefix != b.prefix:
			return b.prefix - a.prefix
		}
		return a.distance - b.distance
	})
	out := make([]string, 0, min(k, len(cs)))
	for _, c := range cs[:min(k, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
