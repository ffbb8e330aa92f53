package remote

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestInsufficientStorage: a store on a filesystem without room for the rollout stream's
// reservation is refused saying how much to free where (issue 28, item 16: NATS said only
// "insufficient storage").
func TestInsufficientStorage(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Serve(ctx, fast(ServeConfig{StoreDir: dir, StreamMaxBytes: 1 << 52})) // 4 PiB
	if err == nil {
		s.Close()
		t.Fatal("a stream of 4 PiB was created")
	}
	for _, want := range []string{"insufficient storage", "4194304.0 GiB (StreamMaxBytes)", dir, "free 5592405.3 GiB there"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
