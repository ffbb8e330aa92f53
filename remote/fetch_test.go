package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// slowStore is an object store whose reads take delay (forever when 0, as a read of a version
// pruned mid-read can) and whose object is gone once pruned is closed; only GetBytes and
// GetInfo are implemented.
type slowStore struct {
	jetstream.ObjectStore
	delay  time.Duration
	data   []byte
	pruned chan struct{}
}

func (s slowStore) GetBytes(ctx context.Context, _ string, _ ...jetstream.GetObjectOpt) ([]byte, error) {
	var after <-chan time.Time
	if s.delay > 0 {
		after = time.After(s.delay)
	}
	select {
	case <-after:
		return s.data, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s slowStore) GetInfo(context.Context, string, ...jetstream.GetObjectInfoOpt) (*jetstream.ObjectInfo, error) {
	select {
	case <-s.pruned:
		return nil, jetstream.ErrObjectNotFound
	default:
		return &jetstream.ObjectInfo{}, nil
	}
}

// fixedPointer is a key-value bucket whose policy key always holds one value; only Get is
// implemented.
type fixedPointer struct {
	jetstream.KeyValue
	value []byte
}

func (f fixedPointer) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return entry{value: f.value}, nil
}

// entry is a Put of value; only Value and Operation are implemented.
type entry struct {
	jetstream.KeyValueEntry
	value []byte
}

func (e entry) Value() []byte                   { return e.value }
func (e entry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// TestFetchGivesUpOnPrunedVersion: a policy read that hangs because its version was pruned
// while it was read is given up as superseded soon after (not after the read's 5 s timeout,
// which stalled a throughput run 5 s in 1 of 3 runs), and the newer pointer that arrived is
// handed back for the watcher to read next; a version merely superseded is read to the end
// (cancelling those starved the batcher); a closed watch ends the read at once.
func TestFetchGivesUpOnPrunedVersion(t *testing.T) {
	sum := sha256.Sum256([]byte("policy"))
	pointer, _ := json.Marshal(policyPointer{Version: 7, SHA256: hex.EncodeToString(sum[:]), Size: 6, Object: policyObject(7)})
	c := &Client{cfg: ClientConfig{RetryMin: time.Millisecond, RetryMax: 10 * time.Millisecond}, log: zap.NewNop()}
	kv := fixedPointer{value: pointer}
	next := entry{value: []byte("v8")}

	// Superseded at 20 ms, still stored: the 300 ms read completes.
	updates := make(chan jetstream.KeyValueEntry, 1)
	time.AfterFunc(20*time.Millisecond, func() { updates <- next })
	p, newer, closed, err := c.fetchWatching(context.Background(), kv, slowStore{delay: 300 * time.Millisecond, data: []byte("policy"), pruned: make(chan struct{})}, pointer, updates)
	if err != nil || p.Version != 7 || string(p.ONNX) != "policy" || newer == nil || string(newer.Value()) != "v8" || closed {
		t.Fatalf("superseded, not pruned: policy v%d %q, newer %v, closed %v, err %v: want v7 read and v8 next", p.Version, p.ONNX, newer, closed, err)
	}

	// Superseded at 20 ms, pruned at 60 ms, the read hanging: given up within a poll or two.
	updates = make(chan jetstream.KeyValueEntry, 1)
	pruned := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { updates <- next })
	time.AfterFunc(60*time.Millisecond, func() { close(pruned) })
	start := time.Now()
	_, newer, closed, err = c.fetchWatching(context.Background(), kv, slowStore{pruned: pruned}, pointer, updates)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("gave up after %v, want soon after the prune (60 ms)", took)
	}
	if !errors.Is(err, errSuperseded) || closed || newer == nil || string(newer.Value()) != "v8" {
		t.Fatalf("err %v, newer %v, closed %v: want errSuperseded and the newer pointer", err, newer, closed)
	}

	ended := make(chan jetstream.KeyValueEntry)
	time.AfterFunc(20*time.Millisecond, func() { close(ended) })
	_, newer, closed, err = c.fetchWatching(context.Background(), kv, slowStore{pruned: make(chan struct{})}, pointer, ended)
	if !closed || newer != nil || !errors.Is(err, errSuperseded) {
		t.Fatalf("closed watch: err %v, newer %v, closed %v", err, newer, closed)
	}

	// The caller's own end still reads as the caller's error.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, _, _, err := c.fetchWatching(ctx, kv, slowStore{pruned: make(chan struct{})}, pointer, make(chan jetstream.KeyValueEntry)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's deadline: %v", err)
	}
}
