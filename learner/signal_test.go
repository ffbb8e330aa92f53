package learner

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSignalPingPong passes a token back and forth through two signals many times, spinning
// and parking, so that a lost wake-up would hang the test (and -race checks the hand-offs).
func TestSignalPingPong(t *testing.T) {
	for _, spin := range []bool{true, false} {
		ping, pong := newSignal(), newSignal()
		const rounds = 2000
		var counter int // written by each side in turn, ordered by the signals
		done := make(chan error, 1)
		go func() {
			for k := uint64(1); k <= rounds; k++ {
				if err := ping.wait(context.Background(), k, spin); err != nil {
					done <- err
					return
				}
				counter++
				pong.post()
			}
			done <- nil
		}()
		for k := uint64(1); k <= rounds; k++ {
			counter++
			ping.post()
			if err := pong.wait(context.Background(), k, spin); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if counter != 2*rounds {
			t.Fatalf("spin=%v: counter %d after %d rounds", spin, counter, rounds)
		}
	}
}

// TestSignalParksAndWakes: a waiter that has spun out and parked is woken by a later post.
func TestSignalParksAndWakes(t *testing.T) {
	s := newSignal()
	go func() {
		time.Sleep(2*spinFor + 5*time.Millisecond)
		s.post()
	}()
	start := time.Now()
	if err := s.wait(context.Background(), 1, true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*spinFor {
		t.Fatalf("wait returned after %v, before the post", d)
	}
	if s.n.Load() != 1 {
		t.Fatalf("count %d after one post", s.n.Load())
	}
}

// TestSignalContext: a parked wait ends with the context's error.
func TestSignalContext(t *testing.T) {
	s := newSignal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := s.wait(ctx, 1, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait = %v, want the context's deadline", err)
	}
	s.post()
	if err := s.wait(context.Background(), 1, false); err != nil {
		t.Fatalf("wait after the post = %v", err)
	}
}
