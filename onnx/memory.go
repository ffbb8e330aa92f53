package onnx

import "github.com/towerrl/towerrl/internal/bounded"

// memory is the host memory a Session may allocate, and where that figure comes from
// (package internal/bounded, which every tool's input checks share).
type memory struct {
	avail  int64
	source string
}

// availableMemory is MemAvailable in /proc/meminfo, lowered to GOMEMLIMIT when it is set.
func availableMemory() memory {
	m := bounded.Available()
	return memory{m.Bytes, m.Source}
}

// formatBytes writes n bytes with a binary unit: "512 B", "1.5 KiB", "4.0 TiB".
func formatBytes(n int64) string { return bounded.FormatBytes(n) }
