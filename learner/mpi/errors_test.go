package mpi

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestStallErrorText(t *testing.T) {
	e := &StallError{Op: "allreduce-weighted", Seq: 57, Rank: 0, Size: 4, Waited: 2*time.Second + 3*time.Millisecond,
		Cause:   context.DeadlineExceeded,
		Others:  []RankState{{Rank: 1, Op: "allreduce-weighted", Seq: 57}, {Rank: 3, Op: "bcast", Seq: 56}},
		Missing: []int{2}}
	want := "mpi: rank 0 of 4 gave up on allreduce-weighted #57 after 2.003s (context deadline exceeded); " +
		"rank 2 never arrived (busy or hung outside MPI, or dead); rank 1 is in allreduce-weighted #57; " +
		"rank 3 is in bcast #56 (out of step); the job cannot continue: call World.Abort"
	if got := e.Error(); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	if !errors.Is(e, ErrStalled) || !errors.Is(e, context.DeadlineExceeded) {
		t.Error("errors.Is does not see ErrStalled and the cause")
	}
	gave := &StallError{Op: "barrier", Seq: 3, Rank: 2, Size: 3, Waited: 40 * time.Millisecond,
		Cause: &GaveUpError{RankState{Rank: 0, Op: "barrier", Seq: 3}}, Others: []RankState{{Rank: 0, Op: "barrier", Seq: 3}},
		Missing: []int{1}}
	want = "mpi: rank 2 of 3 gave up on barrier #3 after 40ms (rank 0 gave up while in barrier #3); " +
		"rank 1 never arrived (busy or hung outside MPI, or dead); rank 0 is in barrier #3; " +
		"the job cannot continue: call World.Abort"
	if got := gave.Error(); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	var g *GaveUpError
	if !errors.As(gave, &g) || g.Rank != 0 {
		t.Errorf("errors.As does not find the GaveUpError of rank 0: %v", g)
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil || c.Timeout != DefaultTimeout || c.Grace != DefaultGrace || c.Spin != DefaultSpin {
		t.Errorf("zero Config: got %+v, %v", c, err)
	}
	if c, _ := (Config{Timeout: -1}).withDefaults(); c.Timeout != -1 {
		t.Errorf("a negative Timeout (no bound) became %v", c.Timeout)
	}
	for _, bad := range []Config{{Grace: -1}, {Spin: -time.Second}} {
		if _, err := bad.withDefaults(); !errors.Is(err, ErrArgument) {
			t.Errorf("%+v: got %v, want ErrArgument", bad, err)
		}
	}
}
