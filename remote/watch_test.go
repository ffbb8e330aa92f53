package remote

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWatchStop: Watch hands over the learn-info lines until Stop closes (Ended "stopped"),
// without registering; a missing Info function, a refused credential and nothing answering
// are errors.
func TestWatchStop(t *testing.T) {
	s := serve(t, ServeConfig{})
	ctx := timeout(t, 20*time.Second)
	if _, err := Watch(ctx, s.URL(), WatchConfig{Client: ClientConfig{Creds: credsFor(t, s, "w")}}); err == nil || !strings.Contains(err.Error(), "Info is nil") {
		t.Errorf("no Info: %v", err)
	}
	if _, err := Watch(ctx, s.URL(), WatchConfig{Info: func([]byte) {}}); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("no credential: %v, want ErrUnauthorized", err)
	}
	if _, err := Watch(ctx, "nats://127.0.0.1:1", WatchConfig{Client: ClientConfig{Creds: credsFor(t, s, "w")}, Info: func([]byte) {},
		ConnectTimeout: 300 * time.Millisecond}); !errors.Is(err, ErrUnreachable) {
		t.Errorf("nothing listening: %v, want ErrUnreachable", err)
	}

	var mu sync.Mutex // guards got
	var got []string
	stop := make(chan struct{})
	type result struct {
		sum WatchSummary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := Watch(ctx, s.URL(), WatchConfig{Client: ClientConfig{Creds: credsFor(t, s, "w")}, Stop: stop, Info: func(line []byte) {
			mu.Lock()
			got = append(got, string(line))
			mu.Unlock()
		}})
		done <- result{sum, err}
	}()
	n := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return ""
		}
		return got[len(got)-1]
	}
	for n() == 0 { // lines are not stored: publish until the watcher listens
		if err := s.PublishInfo([]byte("not json")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.PublishInfo([]byte(`{"iteration":1}`)); err != nil {
		t.Fatal(err)
	}
	for last() != `{"iteration":1}` {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	r := <-done
	if r.err != nil || r.sum.Ended != "stopped" || r.sum.Lines != n() || string(r.sum.Last) != `{"iteration":1}` {
		t.Errorf("Watch: %+v, %v; want %d lines, the last JSON one, stopped", r.sum, r.err, n())
	}
	if b := s.Batchers(); len(b) != 0 {
		t.Errorf("the watcher registered: %+v", b)
	}
}

// TestSourcePublish: Source.Publish publishes in the background, newest version last (a
// version still waiting when a newer one comes may be skipped); Flush waits for it; after the
// Server closed, publishing fails and says so.
func TestSourcePublish(t *testing.T) {
	s := serve(t, ServeConfig{})
	ctx := timeout(t, 20*time.Second)
	src, err := NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	model := []byte("policy")
	for v := int64(1); v <= 20; v++ {
		model[0] = byte(v) // the Source keeps its own copy
		if err := src.Publish(ctx, v, model); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s, ClientConfig{BatcherID: "w"})
	if p := <-c.WatchPolicy(ctx); p.Version != 20 || p.ONNX[0] != 20 || string(p.ONNX[1:]) != "olicy" {
		t.Errorf("after Flush the newest policy is version %d (%q), want 20", p.Version, p.ONNX)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := src.Publish(ctx, 21, model); err != nil {
		t.Fatal(err) // handed over: the error comes with Flush
	}
	if err := src.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after the Server closed: %v, want ErrClosed", err)
	}
	if err := src.Publish(ctx, 22, model); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after a failed publication: %v, want its error", err)
	}
}
