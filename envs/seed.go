package envs

import "math/rand/v2"

// splitmix64 is one step of the SplitMix64 generator's output function: a
// bijective mixer that spreads nearby inputs over the whole 64-bit range.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// newStream returns the random stream of the env with global index index
// under seed: a PCG whose 128-bit state is hashed from (seed, index). It
// depends on nothing else, so an env's noise is the same however envs are
// spread over VecEnvs and workers.
func newStream(seed uint64, index int) *rand.Rand {
	r, _ := newPCGStream(seed, index)
	return r
}

// newPCGStream is newStream that also returns the PCG source, whose state snapshots save.
func newPCGStream(seed uint64, index int) (*rand.Rand, *rand.PCG) {
	h := splitmix64(seed)
	hi := splitmix64(h ^ splitmix64(uint64(index)))
	lo := splitmix64(hi ^ 0x5851f42d4c957f2d ^ uint64(index))
	src := rand.NewPCG(hi, lo)
	return rand.New(src), src
}

// uniform draws from [low, high) as numpy's Generator.uniform does:
// low + (high-low)*U with U a 53-bit float in [0, 1).
func uniform(rng *rand.Rand, low, high float64) float64 {
	return low + (high-low)*rng.Float64()
}
