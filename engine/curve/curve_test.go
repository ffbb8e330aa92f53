package curve

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/towerrl/towerrl/engine"
)

// TestWrite draws a PNG, skipping iterations without episodes (NaN returns).
func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "curve.png")
	ms := []engine.Metrics{{EnvSteps: 512, ReturnMean: 20}, {EnvSteps: 1024, ReturnMean: engine.Float(math.NaN())}, {EnvSteps: 1536, ReturnMean: 40}}
	if err := Write(path, "test", ms); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG: %v", err)
	}
	if err := Write(filepath.Join(t.TempDir(), "missing", "curve.png"), "test", ms); err == nil {
		t.Fatal("writing into a missing folder did not fail")
	}
}
