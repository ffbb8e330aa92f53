package spin

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPingPong passes a token back and forth through two signals many times, spinning
// and parking, so that a lost wake-up would hang the test (and -race checks the hand-offs).
func TestPingPong(t *testing.T) {
	for _, spin := range []bool{true, false} {
		ping, pong := New(), New()
		const rounds = 2000
		var counter int // written by each side in turn, ordered by the signals
		done := make(chan error, 1)
		go func() {
			for k := uint64(1); k <= rounds; k++ {
				if err := ping.Wait(context.Background(), k, spin); err != nil {
					done <- err
					return
				}
				counter++
				pong.Post()
			}
			done <- nil
		}()
		for k := uint64(1); k <= rounds; k++ {
			counter++
			ping.Post()
			if err := pong.Wait(context.Background(), k, spin); err != nil {
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

// TestParksAndWakes: a waiter that has spun out and parked is woken by a later post.
func TestParksAndWakes(t *testing.T) {
	s := New()
	go func() {
		time.Sleep(2*For + 5*time.Millisecond)
		s.Post()
	}()
	start := time.Now()
	if err := s.Wait(context.Background(), 1, true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*For {
		t.Fatalf("wait returned after %v, before the post", d)
	}
	if s.n.Load() != 1 {
		t.Fatalf("count %d after one post", s.n.Load())
	}
}

// TestContext: a parked wait ends with the context's error.
func TestContext(t *testing.T) {
	s := New()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx, 1, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait = %v, want the context's deadline", err)
	}
	s.Post()
	if err := s.Wait(context.Background(), 1, false); err != nil {
		t.Fatalf("wait after the post = %v", err)
	}
}

// TestPool: every Run calls work once for every shard, in parallel with the caller's shard,
// with the Run's writes visible to work and work's writes visible after Run (-race checks the
// hand-offs); Close stops the goroutines and is idempotent.
func TestPool(t *testing.T) {
	for _, k := range []int{1, 2, 5} {
		in := make([]int, k)
		out := make([]int, k)
		p := NewPool(k, func(s int) { out[s] += in[s] })
		for run := 1; run <= 300; run++ {
			for s := range in {
				in[s] = run * (s + 1)
			}
			p.Run()
			for s := range out {
				if want := (s + 1) * run * (run + 1) / 2; out[s] != want {
					t.Fatalf("k=%d run %d: shard %d total %d, want %d", k, run, s, out[s], want)
				}
			}
		}
		p.Close()
		p.Close()
	}
}
