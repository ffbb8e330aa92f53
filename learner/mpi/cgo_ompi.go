//go:build mpi && cgo && !mpich

package mpi

// #cgo pkg-config: ompi-c
import "C"
