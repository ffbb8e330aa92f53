package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/towerrl/towerrl/remote"
)

// remoteOpts are the options of `batcher --connect URL --creds FILE` and the flags named in
// set, as flag parsing leaves them.
func remoteOpts(url, creds string, set ...string) options {
	o := options{env: "", envs: 64, workers: 1, rollout: 128, steps: 100000, set: map[string]bool{"connect": true, "creds": true}}
	o.remote = remoteOptions{connect: url, creds: creds, connectTimeout: time.Minute}
	o.flags.Device, o.flags.Threads = "cpu", 1
	for _, s := range set {
		o.set[s] = true
	}
	return o
}

// TestRemoteFlags: flags that do not go together, or are missing, are refused before
// anything connects, naming the flag and what to do.
func TestRemoteFlags(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "batcher.creds")
	if err := os.WriteFile(creds, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*options)
		want string
	}{
		{"connect without creds", func(o *options) { o.remote.creds = ""; delete(o.set, "creds") }, "--connect needs --creds FILE: the batcher's credential the learner wrote"},
		{"creds without connect", func(o *options) { o.remote.connect = ""; delete(o.set, "connect") }, "--creds needs --connect URL"},
		{"info without connect", func(o *options) {
			o.remote.connect, o.remote.creds = "", ""
			o.set = map[string]bool{"info": true}
		}, "--info needs --connect URL"},
		{"policy", func(o *options) { o.policy = "p.onnx"; o.set["policy"] = true }, "--policy does not apply with --connect: the learner's task sets"},
		{"steps", func(o *options) { o.set["steps"] = true }, "--steps does not apply with --connect"},
		{"out", func(o *options) { o.out = dir; o.set["out"] = true }, "--out does not apply with --connect"},
		{"seed", func(o *options) { o.set["seed"] = true }, "--seed does not apply"},
		{"deterministic", func(o *options) { o.deterministic = true; o.set["deterministic"] = true }, "--deterministic does not apply"},
		{"missing creds file", func(o *options) { o.remote.creds = filepath.Join(dir, "nope.creds") }, "--creds: stat " + filepath.Join(dir, "nope.creds")},
		{"missing ca", func(o *options) { o.remote.ca = filepath.Join(dir, "ca.pem") }, "--ca: stat"},
		{"codec", func(o *options) { o.remote.codec = "gzip" }, `--codec: remote: unknown codec "gzip"`},
		{"id", func(o *options) { o.remote.id = "host.1" }, `--id "host.1": use letters, digits, '-' and '_' only (e.g. "host_1")`},
		{"workers", func(o *options) { o.workers = 0 }, "--workers 0: want at least 1"},
		{"env threads", func(o *options) { o.envThreads = -1 }, "--env-threads -1"},
		{"connect timeout", func(o *options) { o.remote.connectTimeout = -time.Second }, "--connect-timeout -1s"},
		{"threads", func(o *options) { o.flags.Threads = 100000 }, "--threads 100000"},
		{"device", func(o *options) { o.flags.Device = "tpu" }, "--device"},
		{"unknown env", func(o *options) { o.env = "Pong-v9" }, `--env: envs: unknown environment id "Pong-v9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := remoteOpts("nats://127.0.0.1:1", creds)
			tc.edit(&o)
			var stdout bytes.Buffer
			err := runRemote(context.Background(), &stdout, zap.NewNop(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("printed %q", stdout.String())
			}
		})
	}
}

// TestRemoteRun runs the command against a learner in this process: it collects the
// learner's task with its policy until the learner ends the run, then prints its summary.
// A wrong credential and an unreachable learner are errors that say what to do.
func TestRemoteRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := t.TempDir()
	s, err := remote.Serve(ctx, remote.ServeConfig{StoreDir: store, Batchers: []string{"cli"}, HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AddTask(remote.Task{ID: "t", EnvID: "CartPole-v1", Seed: 3, Envs: 4, RolloutLen: 16}); err != nil {
		t.Fatal(err)
	}
	model, err := os.ReadFile("../../testdata/mlp_tanh.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PublishPolicy(ctx, 5, model); err != nil {
		t.Fatal(err)
	}
	src, err := remote.NewSource(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	kp, err := nkeys.CreateUser() // another run's credential
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	other := filepath.Join(t.TempDir(), "batcher.creds")
	if err := os.WriteFile(other, append(seed, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		o     options
		is    error
		wants []string
	}{
		{"wrong credential", remoteOpts(s.URL(), other), remote.ErrUnauthorized, []string{"DIR/creds/batcher-K.creds"}},
		{"another batcher's ID", func() options {
			o := remoteOpts(s.URL(), filepath.Join(store, "cli.creds"), "id")
			o.remote.id = "other"
			return o
		}(), nil, []string{`credential of batcher "cli"`, "--id"}},
		{"nothing listening", func() options {
			o := remoteOpts("nats://127.0.0.1:1", filepath.Join(store, "cli.creds"), "connect-timeout")
			o.remote.connectTimeout = 300 * time.Millisecond
			return o
		}(), remote.ErrUnreachable, []string{"train --serve", "--connect-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runRemote(ctx, io.Discard, zap.NewNop(), tc.o)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want %v", err, tc.is)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %s", err, w)
				}
			}
		})
	}

	o := remoteOpts(s.URL(), filepath.Join(store, "cli.creds"), "env", "workers", "id")
	o.env, o.workers, o.remote.id = "CartPole-v1", 2, "cli"
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runRemote(ctx, &stdout, zap.NewNop(), o) }()
	for range 5 {
		r, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.BatcherID != "cli" || r.Rollout.T != 16 || r.Rollout.N != 4 || r.PolicyVersion != 5 {
			t.Fatalf("rollout from %s: T=%d N=%d version %d", r.BatcherID, r.Rollout.T, r.Rollout.N, r.PolicyVersion)
		}
		if err := r.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("batcher --connect: %v", err)
	}
	var sum remote.BatcherSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	if sum.BatcherID != "cli" || sum.Ended != "run ended" || sum.Rollouts < 5 || sum.Env != "CartPole-v1" || sum.PolicyVersion != 5 ||
		sum.Workers != 2 || sum.EnvsPerWorker != 2 || len(sum.Tasks) != 1 || sum.Device != "cpu" {
		t.Errorf("summary %s", stdout.String())
	}
	for _, k := range []string{"rollouts", "confirmed", "steps", "steps_per_sec", "bytes_per_rollout", "policy_version", "ended"} {
		if !strings.Contains(stdout.String(), `"`+k+`"`) {
			t.Errorf("summary lacks %q", k)
		}
	}
}

// watchOpts are the options of `batcher --watch URL --creds FILE` and the flags named in set.
func watchOpts(url, creds string, set ...string) options {
	o := remoteOpts("", creds, set...)
	delete(o.set, "connect")
	o.set["watch"] = true
	o.remote.watch = url
	return o
}

// TestWatchFlags: a watcher takes the connection's flags only.
func TestWatchFlags(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "batcher.creds")
	if err := os.WriteFile(creds, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    options
		want string
	}{
		{"no URL", watchOpts("", creds), "--watch needs the learner's NATS URL"},
		{"with connect", func() options {
			o := watchOpts("nats://127.0.0.1:1", creds, "connect")
			o.remote.connect = "nats://127.0.0.1:1"
			return o
		}(), "give one of them"},
		{"workers", watchOpts("nats://127.0.0.1:1", creds, "workers"), "--workers does not apply with --watch"},
		{"info", watchOpts("nats://127.0.0.1:1", creds, "info"), "--info does not apply with --watch"},
		{"no creds", func() options {
			o := watchOpts("nats://127.0.0.1:1", "")
			delete(o.set, "creds")
			return o
		}(), "--watch needs --creds FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := runWatch(context.Background(), &stdout, zap.NewNop(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("printed %q", stdout.String())
			}
		})
	}
}

// TestWatch: batcher --watch logs the learner's learn-info lines without registering, and
// prints its summary (the number of lines, the newest) when the learner ends the run.
func TestWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := t.TempDir()
	s, err := remote.Serve(ctx, remote.ServeConfig{StoreDir: store, Batchers: []string{"w"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	core, logs := observer.New(zap.InfoLevel)
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runWatch(ctx, &stdout, zap.New(core), watchOpts(s.URL(), filepath.Join(store, "w.creds")))
	}()
	// Lines are not stored: publish until the watcher shows one, then three more.
	learnerLines := func() int { return logs.FilterMessage("learner").Len() }
	for i := 0; learnerLines() == 0; i++ {
		if err := s.PublishInfo(fmt.Appendf(nil, `{"iteration":%d}`, i)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the watcher ended early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	seen := learnerLines()
	for i := 100; i < 103; i++ {
		if err := s.PublishInfo(fmt.Appendf(nil, `{"iteration":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	for learnerLines() < seen+3 {
		time.Sleep(10 * time.Millisecond)
	}
	if b := s.Batchers(); len(b) != 0 {
		t.Errorf("the watcher registered: %+v", b)
	}
	if err := s.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var sum remote.WatchSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	if sum.Lines != seen+3 || string(sum.Last) != `{"iteration":102}` || sum.Ended != "run ended" || sum.URL != s.URL() {
		t.Errorf("summary %s; want %d lines, the last {\"iteration\":102}, ended by the run", stdout.String(), seen+3)
	}
	last := logs.FilterMessage("learner").All()
	if got := last[len(last)-1].ContextMap()["info"]; got != `{"iteration":102}` {
		t.Errorf("the last line logged: %v", got)
	}
}
