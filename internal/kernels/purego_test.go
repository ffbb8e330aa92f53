//go:build !amd64 || !cgo || purego

package kernels

// nativeBuild: this build runs the C kernels.
const nativeBuild = false
