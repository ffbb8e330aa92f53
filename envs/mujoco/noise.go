//go:build mujoco && cgo

package mujoco

import "math/rand/v2"

// Reset noise with Gymnasium's distributions (numpy's uniform and standard_normal; the bits
// are towerrl's own PCG streams, as for the classic envs).

// addUniform sets x[i] = base[i] + uniform(-scale, scale); a nil base is zeros (init_qvel).
func addUniform(x, base []float64, rng *rand.Rand, scale float64) {
	for i := range x {
		b := 0.0
		if base != nil {
			b = base[i]
		}
		x[i] = b + (-scale + 2*scale*rng.Float64())
	}
}

// addNormal sets x[i] = base[i] + scale × standard normal; a nil base is zeros.
func addNormal(x, base []float64, rng *rand.Rand, scale float64) {
	for i := range x {
		b := 0.0
		if base != nil {
			b = base[i]
		}
		x[i] = b + scale*rng.NormFloat64()
	}
}

// sumSquares is Σ a² (Gymnasium's np.sum(np.square(action))).
func sumSquares(a []float32) float64 {
	s := 0.0
	for _, x := range a {
		s += float64(x) * float64(x)
	}
	return s
}

// put writes x as float32 to obs from index k and returns the next index.
func put(obs []float32, k int, x ...float64) int {
	for _, v := range x {
		obs[k] = float32(v)
		k++
	}
	return k
}

// putClipped is put with each value clipped to [-c, c].
func putClipped(obs []float32, k int, c float64, x []float64) int {
	for _, v := range x {
		obs[k] = float32(min(max(v, -c), c))
		k++
	}
	return k
}
