package remote

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRolloutsEndToEnd moves CartPole-shaped rollouts (T=128, N=64: 13 columns,
// ~590 KB of float32/int64, observations of noise, so compression is pessimistic) from
// batcher Clients to the learner over loopback: encode, compress, publish with bounded
// in-flight, store in the file-backed work queue, pull, reassemble, decode, dedup and a
// confirmed Ack each. Reported: rollouts/s and MB/s of column data end to end (first
// publish to last ack), wire MB/s, and the median and p99 time from PublishRollout's call
// to the learner's receipt.
func BenchmarkRolloutsEndToEnd(b *testing.B) {
	for _, bc := range []struct {
		codec    Codec
		batchers int
	}{{CodecS2, 1}, {CodecNone, 1}, {CodecZstd, 1}, {CodecS2, 3}} {
		b.Run(fmt.Sprintf("%v/batchers=%d", bc.codec, bc.batchers), func(b *testing.B) {
			benchRollouts(b, bc.codec, bc.batchers)
		})
	}
}

// benchServe serves on a temporary store and dials batchers Clients with codec; all are
// closed when the benchmark ends.
func benchServe(b *testing.B, ctx context.Context, codec Codec, batchers int) (*Server, []*Client, <-chan *Delivery) {
	s, err := Serve(ctx, ServeConfig{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	clients := make([]*Client, batchers)
	for i := range clients {
		creds, err := s.AddBatcher(fmt.Sprint("bench", i))
		if err != nil {
			b.Fatal(err)
		}
		clients[i], err = Dial(ctx, s.URL(), ClientConfig{Creds: creds, Codec: codec})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { clients[i].Close() })
	}
	ch, err := s.Rollouts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return s, clients, ch
}

func benchRollouts(b *testing.B, codec Codec, batchers int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, clients, ch := benchServe(b, ctx, codec, batchers)
	m := sampleRollout(128, 64, 4, 1)
	raw := rawBytes(&m)

	var (
		mu      sync.Mutex // guards sent, latency
		sent    = map[rolloutKey]time.Time{}
		latency []time.Duration
		n, wire atomic.Int64
		ackTime atomic.Int64 // in AckAll
	)
	consumed := make(chan struct{})
	go func() { // the learner: acks each stack of 8 rollouts at once
		defer close(consumed)
		var stack []*Delivery
		flush := func() {
			t0 := time.Now()
			if err := s.AckAll(ctx, stack...); err != nil && ctx.Err() == nil {
				b.Error(err)
			}
			ackTime.Add(int64(time.Since(t0)))
			n.Add(int64(len(stack)))
			stack = stack[:0]
		}
		for {
			var d *Delivery
			var ok bool
			select {
			case d, ok = <-ch:
			case <-time.After(5 * time.Millisecond): // a partial stack at the end
				if len(stack) > 0 {
					flush()
				}
				continue
			}
			if !ok {
				return
			}
			now := time.Now()
			mu.Lock()
			if t0, ok := sent[d.key]; ok {
				latency = append(latency, now.Sub(t0))
			}
			mu.Unlock()
			wire.Add(int64(d.Bytes))
			if stack = append(stack, d); len(stack) == 8 {
				flush()
			}
		}
	}()

	start := time.Now()
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				t0 := time.Now()
				seq, err := c.PublishRollout(ctx, m)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				sent[rolloutKey{c.ID(), c.Session(), seq}] = t0
				mu.Unlock()
			}
		}()
	}
	var published int64
	for b.Loop() {
		jobs <- struct{}{}
		published++
	}
	close(jobs)
	wg.Wait()
	deadline := time.Now().Add(time.Minute)
	for n.Load() < published {
		if time.Now().After(deadline) {
			b.Fatalf("the learner received %d of %d rollouts", n.Load(), published)
		}
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(published)/elapsed.Seconds(), "rollouts/s")
	b.ReportMetric(float64(published)*float64(raw)/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(wire.Load())/elapsed.Seconds()/1e6, "wire-MB/s")
	mu.Lock()
	slices.Sort(latency)
	if len(latency) > 0 {
		b.ReportMetric(float64(latency[len(latency)/2].Microseconds())/1e3, "p50-ms")
		b.ReportMetric(float64(latency[len(latency)*99/100].Microseconds())/1e3, "p99-ms")
	}
	mu.Unlock()
	b.ReportMetric(float64(ackTime.Load())/float64(published)/1e6, "ack-ms/rollout")
	b.ReportMetric(0, "ns/op") // the loop only queues publishes: rollouts/s is the figure
	cancel()
	<-consumed
}

// BenchmarkRolloutLatency sends one CartPole-shaped rollout (T=128, N=64) at a time and
// waits for the learner to receive and acknowledge it: the per-rollout latency with no
// queue in front of it.
func BenchmarkRolloutLatency(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, clients, ch := benchServe(b, ctx, CodecDefault, 1)
	c := clients[0]
	m := sampleRollout(128, 64, 4, 1)
	var toLearner, total time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.PublishRollout(ctx, m); err != nil {
			b.Fatal(err)
		}
		d := <-ch
		toLearner += time.Since(t0)
		if err := d.Ack(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(toLearner.Microseconds())/float64(b.N)/1e3, "ms-to-learner")
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1e3, "ms-with-ack")
	b.ReportMetric(0, "ns/op")
}
