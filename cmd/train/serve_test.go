package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/towerrl/towerrl/engine"
	"github.com/towerrl/towerrl/remote"
)

// freeAddr is a loopback host:port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServing runs a serving learner (run with cfg, flags f, into dir) on a goroutine,
// waits until it wrote the batchers' credentials and returns their folder with the run's
// outcome.
func startServing(t *testing.T, ctx context.Context, out io.Writer, log *zap.Logger, stop <-chan struct{}, cfg engine.Config, dir string, f serveFlags) (string, <-chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run(ctx, out, log, stop, cfg, nil, dir, "", "", nil, f) }()
	creds := filepath.Join(dir, "creds")
	last := filepath.Join(creds, fmt.Sprintf("batcher-%d.creds", max(f.batchers, f.tasks)-1)) // written last
	for _, err := os.Stat(last); err != nil; _, err = os.Stat(last) {
		select {
		case err := <-done:
			t.Fatalf("the run ended before serving: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return creds, done
}

// TestServeRemoteBatchers: train --serve trains APPO and PPO on rollouts from two remote
// batchers (remote.RunBatcher, as batcher --connect runs it) that take the credential the
// run wrote, and end with the run (RunBatcher returns nil).
func TestServeRemoteBatchers(t *testing.T) {
	for _, name := range []string{"appo", "ppo"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			addr := freeAddr(t)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var out bytes.Buffer
			cfg := engine.Config{Env: "CartPole-v1", Algo: name, TotalSteps: 512 * 40, EvalEpisodes: 3, Seed: 2}
			creds, done := startServing(t, ctx, &out, zap.NewNop(), nil, cfg, dir, serveFlags{addr: addr, tasks: 2, credits: -1})
			var wg sync.WaitGroup
			sums := make([]remote.BatcherSummary, 2)
			errs := make([]error, 2)
			for i := range 2 {
				wg.Go(func() {
					sums[i], errs[i] = remote.RunBatcher(ctx, "nats://"+addr, remote.BatcherConfig{Client: remote.ClientConfig{Creds: filepath.Join(creds, fmt.Sprintf("batcher-%d.creds", i))}})
				})
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil || sums[i].Ended != "run ended" {
					t.Errorf("batcher %d: %v, ended %q", i, err, sums[i].Ended)
				}
			}
			var sum engine.Result
			if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.EnvSteps != 512*40 {
				t.Fatalf("summary %s (%v)", out.String(), err)
			}
			var rem struct {
				Remote *remote.SourceStats `json:"remote"`
			}
			if err := json.Unmarshal(out.Bytes(), &rem); err != nil || rem.Remote == nil || rem.Remote.Delivered < sum.RolloutsTrained+sum.RolloutsDropped ||
				sum.RolloutsTrained != 40 || len(rem.Remote.PerBatcher) != 2 || rem.Remote.Duplicates != 0 {
				t.Fatalf("summary %s: want 40 rollouts trained, the server's counts and 2 batchers (%v)", out.String(), err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
			if err != nil || bytes.Count(b, []byte("\n")) != 40 {
				t.Fatalf("metrics: %d lines (%v)", bytes.Count(b, []byte("\n")), err)
			}
			var m engine.Metrics
			if err := json.Unmarshal(b[bytes.LastIndexByte(b[:len(b)-1], '\n')+1:], &m); err != nil || m.Transport == nil ||
				m.Transport.Rollouts < 1 || m.Transport.Bytes <= 0 || m.Transport.LatencySeconds <= 0 {
				t.Fatalf("the last metrics line's transport: %+v (%v)", m.Transport, err)
			}
		})
	}
}

// TestServeFlags: conflicting or incomplete serving flags are refused before anything starts.
func TestServeFlags(t *testing.T) {
	cfg := engine.Config{Env: "CartPole-v1"}
	for _, tc := range []struct {
		f    serveFlags
		algo string
		want string
	}{
		{serveFlags{addr: "127.0.0.1:1", nats: "nats://x", tasks: 1}, "", "give one of them"},
		{serveFlags{addr: "127.0.0.1:1", natsCreds: "x", tasks: 1}, "", "--nats-creds"},
		{serveFlags{addr: "127.0.0.1:1", tlsCert: "c", tasks: 1}, "", "go together"},
		{serveFlags{addr: "127.0.0.1:1", tasks: 0}, "", "--tasks 0"},
		{serveFlags{addr: "127.0.0.1:1", tasks: 1}, "ddppo", "ddppo"},
		{serveFlags{addr: "127.0.0.1:1", tasks: 1, localWorkers: -1}, "", "--local-workers -1"},
		{serveFlags{localWorkers: 1}, "", "--local-workers N"},
		{serveFlags{nats: "nats://127.0.0.1:1", tasks: 1, batchers: 2}, "", "operator issues one per batcher"},
		{serveFlags{addr: "127.0.0.1:1", tasks: 1, batchers: -1}, "", "--batchers -1"},
	} {
		c := cfg
		c.Algo = tc.algo
		err := run(context.Background(), &bytes.Buffer{}, zap.NewNop(), nil, c, nil, filepath.Join(t.TempDir(), "r"), "", "", nil, tc.f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.f, err, tc.want)
		}
		if errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
}

// TestServeLocalWorkers: with --local-workers and no remote batcher the serving learner
// collects with batchers of its own, whose rollouts go through its NATS server and its
// accounting like remote ones.
func TestServeLocalWorkers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cfg := engine.Config{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 20, EvalEpisodes: -1, Seed: 3}
	if err := run(ctx, &out, zap.NewNop(), nil, cfg, nil, dir, "", "", nil, serveFlags{addr: freeAddr(t), localWorkers: 2, credits: -1}); err != nil {
		t.Fatal(err)
	}
	var sum struct {
		engine.Result
		Remote *remote.SourceStats `json:"remote"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.EnvSteps != 512*20 || sum.Remote == nil {
		t.Fatalf("summary %s (%v)", out.String(), err)
	}
	if sum.RolloutsTrained != 20 || sum.Remote.Delivered != sum.RolloutsTrained+sum.RolloutsDropped || sum.Remote.Acked != sum.Remote.Delivered {
		t.Errorf("trained %d, dropped %d; the server delivered %d, acked %d", sum.RolloutsTrained, sum.RolloutsDropped,
			sum.Remote.Delivered, sum.Remote.Acked)
	}
	if len(sum.Remote.PerBatcher) != 2 || sum.Remote.PerBatcher["local-0"] == 0 || sum.Remote.PerBatcher["local-1"] == 0 {
		t.Errorf("per batcher %v, want local-0 and local-1", sum.Remote.PerBatcher)
	}
}

// TestServeStopResume: a serving learner stopped gracefully does not end the run, so its
// remote batcher waits (reconnecting) instead of exiting; the learner resumed on the same
// store and address finishes the run, and the batcher ends with it.
func TestServeStopResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := engine.Config{Env: "CartPole-v1", Algo: "appo", TotalSteps: 512 * 30, EvalEpisodes: -1, Seed: 4}
	stop := make(chan struct{})
	creds, done := startServing(t, ctx, io.Discard, zap.NewNop(), stop, cfg, dir, serveFlags{addr: addr, tasks: 1})
	type result struct {
		sum remote.BatcherSummary
		err error
	}
	bdone := make(chan result, 1)
	go func() {
		sum, err := remote.RunBatcher(ctx, "nats://"+addr, remote.BatcherConfig{Client: remote.ClientConfig{Creds: filepath.Join(creds, "batcher-0.creds")}})
		bdone <- result{sum, err}
	}()
	for { // a few iterations, then the first SIGINT
		b, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
		if bytes.Count(b, []byte("\n")) >= 5 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	close(stop)
	if err := <-done; !errors.Is(err, engine.ErrStopped) {
		t.Fatalf("stopped run: %v, want engine.ErrStopped", err)
	}
	select {
	case r := <-bdone:
		t.Fatalf("the batcher ended with the stopped learner (%v, ended %q): the run was not over", r.err, r.sum.Ended)
	case <-time.After(time.Second):
	}
	var out bytes.Buffer
	if err := run(ctx, &out, zap.NewNop(), nil, engine.Config{}, nil, "", dir, "", nil, serveFlags{addr: addr, tasks: 1}); err != nil {
		t.Fatal(err)
	}
	var sum engine.Result
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.EnvSteps != 512*30 {
		t.Fatalf("resumed run's summary %s (%v)", out.String(), err)
	}
	select {
	case r := <-bdone:
		if r.err != nil || r.sum.Ended != "run ended" {
			t.Errorf("batcher: %v, ended %q; want the run's end", r.err, r.sum.Ended)
		}
	case <-time.After(time.Minute):
		t.Fatal("the batcher did not end with the resumed run")
	}
}
