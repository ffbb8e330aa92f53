package spin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// TestSignalWaiters: several goroutines wait on one Signal for the same counts, some of them
// long enough to have parked; every Post releases all the waiters it satisfies.
func TestSignalWaiters(t *testing.T) {
	for _, spin := range []bool{true, false} {
		s := New()
		const waiters, posts = 4, 50
		var wg sync.WaitGroup
		errs := make(chan error, waiters)
		var seen [waiters]atomic.Uint64
		for w := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := uint64(1); k <= posts; k++ {
					if err := s.Wait(context.Background(), k, spin); err != nil {
						errs <- err
						return
					}
					seen[w].Store(k)
				}
			}()
		}
		for k := uint64(1); k <= posts; k++ {
			if k%10 == 0 {
				time.Sleep(For + time.Millisecond) // the waiters park
			}
			s.Post()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for w := range waiters {
			if got := seen[w].Load(); got != posts {
				t.Errorf("spin=%v: waiter %d saw %d posts of %d", spin, w, got, posts)
			}
		}
		if s.Load() != posts || s.parked.Load() != 0 {
			t.Errorf("spin=%v: %d posts, %d waiters still parked", spin, s.Load(), s.parked.Load())
		}
	}
}

// TestParkedNoAllocs: hand-offs that park (a Pool with spinning off) allocate nothing, and a
// parked wait with a context that can end still ends with it after other waits woke.
func TestParkedNoAllocs(t *testing.T) {
	p := NewPool(2, func(int) {}, WithMode(Off))
	defer p.Close()
	if n := testing.AllocsPerRun(200, p.Run); n != 0 {
		t.Errorf("%v allocations per parked Run", n)
	}
	s := New()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, 2, false) }()
	time.Sleep(time.Millisecond)
	s.Post() // wakes the waiter for 2 if it has parked, and it parks again
	time.Sleep(time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("a wait for 2 events returned after 1: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the wait for 2 events after its context was cancelled: %v", err)
	}
}

// TestBarrier: n goroutines meet round after round; every write made before a round's Wait is
// seen by all of them after it, the last to arrive runs last exactly once per round before
// anyone leaves, and a round that waits longer than For (parked waiters) still completes.
func TestBarrier(t *testing.T) {
	for _, mode := range []Mode{Auto, Off} {
		for _, n := range []int{1, 2, 3} {
			b := NewBarrier(n, mode)
			const rounds = 200
			slots := make([]int, n) // slot i written by goroutine i before each Wait
			lasts, total := 0, 0    // written by the last to arrive
			var wg sync.WaitGroup
			errs := make(chan string, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for r := 1; r <= rounds; r++ {
						if i == 0 && r%50 == 0 {
							time.Sleep(For + time.Millisecond)
						}
						slots[i] = r
						b.Wait(func() {
							lasts++
							for _, v := range slots {
								total += v
							}
						})
						if lasts != r || total != n*r*(r+1)/2 {
							errs <- fmt.Sprintf("round %d: last ran %d times, total %d", r, lasts, total)
							return
						}
						for j, v := range slots {
							if v != r {
								errs <- fmt.Sprintf("round %d: slot %d holds %d", r, j, v)
								return
							}
						}
						b.Wait(nil) // nobody writes a slot of the next round before all have read this one
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Fatalf("%v n=%d: %s", mode, n, e)
			}
		}
	}
}

// TestPool: every Run calls work once for every shard, in parallel with the caller's shard,
// with the Run's writes visible to work and work's writes visible after Run (-race checks the
// hand-offs), spinning or not; Close stops the goroutines, returns nil and is idempotent, and
// a Run after it panics instead of waiting forever.
func TestPool(t *testing.T) {
	for _, mode := range []Mode{Auto, Off} {
		for _, k := range []int{1, 2, 5} {
			in := make([]int, k)
			out := make([]int, k)
			p := NewPool(k, func(s int) { out[s] += in[s] }, WithMode(mode))
			if want := mode == Auto && Allowed(k); p.spin != want {
				t.Errorf("%v k=%d: the pool spins: %v, want %v", mode, k, p.spin, want)
			}
			for run := 1; run <= 300; run++ {
				for s := range in {
					in[s] = run * (s + 1)
				}
				p.Run()
				for s := range out {
					if want := (s + 1) * run * (run + 1) / 2; out[s] != want {
						t.Fatalf("%v k=%d run %d: shard %d total %d, want %d", mode, k, run, s, out[s], want)
					}
				}
			}
			for i := range 2 {
				if err := p.Close(); err != nil {
					t.Fatalf("%v k=%d: Close #%d = %v", mode, k, i+1, err)
				}
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%v k=%d: Run after Close did not panic", mode, k)
					}
				}()
				p.Run()
			}()
		}
	}
	if p := NewPool(2, func(int) {}); p.spin != Allowed(2) {
		t.Errorf("the default pool spins: %v, want Allowed(2) = %v", p.spin, Allowed(2))
	} else if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMode: the modes' names, parsing, text (JSON) round trip, and Spins.
func TestMode(t *testing.T) {
	for _, c := range []struct {
		text string
		want Mode
		err  bool
	}{
		{"", Auto, false}, {"auto", Auto, false}, {"off", Off, false},
		{"on", Auto, true}, {"Off", Auto, true}, {"0", Auto, true},
	} {
		got, err := ParseMode(c.text)
		if (err != nil) != c.err || (err != nil && !errors.Is(err, ErrMode)) || got != c.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v, error %v", c.text, got, err, c.want, c.err)
		}
	}
	type config struct{ Spin Mode }
	for _, m := range []Mode{Auto, Off} {
		data, err := json.Marshal(config{m})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"Spin":"` + m.String() + `"}`; string(data) != want {
			t.Errorf("%v marshals to %s, want %s", m, data, want)
		}
		var back config
		if err := json.Unmarshal(data, &back); err != nil || back.Spin != m {
			t.Errorf("%s unmarshals to %v, %v", data, back.Spin, err)
		}
	}
	var c config
	if err := json.Unmarshal([]byte(`{"Spin":"always"}`), &c); !errors.Is(err, ErrMode) {
		t.Errorf("unmarshalling an unknown mode: %v, want ErrMode", err)
	}
	if _, err := json.Marshal(config{Mode(7)}); !errors.Is(err, ErrMode) {
		t.Errorf("marshalling Mode(7): %v, want ErrMode", err)
	}
	if Mode(7).String() != "Mode(7)" {
		t.Errorf("Mode(7).String() = %q", Mode(7).String())
	}
	if Off.Spins(1) || Auto.Spins(1) != Allowed(1) || Auto.Spins(1<<20) {
		t.Errorf("Spins: Off %v, Auto(1) %v, Auto(2^20) %v", Off.Spins(1), Auto.Spins(1), Auto.Spins(1<<20))
	}
}

// TestModeFor: a NoSpin setting is Off, its absence Auto.
func TestModeFor(t *testing.T) {
	if ModeFor(true) != Off || ModeFor(false) != Auto {
		t.Fatalf("ModeFor(true) = %v, ModeFor(false) = %v; want off, auto", ModeFor(true), ModeFor(false))
	}
}
