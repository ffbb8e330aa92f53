//go:build mpi && cgo && mpich

package mpi

// #cgo pkg-config: mpich
import "C"
