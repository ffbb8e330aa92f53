package mpi

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrNotBuilt is returned by every constructor of a build without the mpi tag (or
	// without cgo).
	ErrNotBuilt = errors.New("mpi: built without MPI support: install Open MPI " +
		"(apt-get install openmpi-bin libopenmpi-dev) and build with `make mpi` " +
		"(go build -tags mpi ./cmd/... with cgo enabled; -tags mpi,mpich for MPICH), then launch " +
		"with mpirun -np N --bind-to none")
	// ErrArgument: a bad argument to a call (a negative or non-finite weight, a root that is
	// not a rank, a buffer too long for one MPI message) or a bad Config field.
	ErrArgument = errors.New("mpi: invalid argument")
	// ErrStalled: a collective did not complete before its deadline, its context ended, or
	// another rank gave up on it. The error is a *StallError naming the ranks.
	ErrStalled = errors.New("mpi: collective stalled")
	// ErrBroken: a call on a World whose earlier collective failed. Such a World can only be
	// aborted (World.Abort), which ends every rank of the job.
	ErrBroken = errors.New("mpi: world broken by an earlier failure; call Abort to end the job")
	// ErrOutOfStep: the ranks met in one collective call at different points of their call
	// sequences (a rank skipped or added a call).
	ErrOutOfStep = errors.New("mpi: ranks are out of step")
	// ErrMismatch: CheckSame found ranks whose hashes differ. The error is a *MismatchError.
	ErrMismatch = errors.New("mpi: hashes differ between ranks")
	// ErrMPI: an MPI call returned an error code; the message is MPI's.
	ErrMPI = errors.New("mpi: MPI call failed")
	// ErrFinalized: a call on a World after Finalize.
	ErrFinalized = errors.New("mpi: world finalized")
)

// RankState is where another rank said it was when a collective stalled.
type RankState struct {
	Rank int
	Op   string // the operation it was waiting in
	Seq  uint64 // its call sequence number (1 for a World's first collective)
}

func (s RankState) String() string { return fmt.Sprintf("rank %d is in %s #%d", s.Rank, s.Op, s.Seq) }

// StallError reports a collective that did not complete on this rank. After it the World is
// broken: MPI cannot cancel a collective that was started, so the job must end (World.Abort).
type StallError struct {
	Op     string        // the operation, e.g. "allreduce-weighted"
	Seq    uint64        // this rank's sequence number of the call
	Rank   int           // this rank
	Size   int           // ranks in the job
	Waited time.Duration // how long this rank waited
	// Cause is context.DeadlineExceeded (the context's deadline or Config.Timeout passed),
	// context.Canceled, or a *GaveUpError when another rank gave up first.
	Cause error
	// Others are the ranks that answered: they were waiting in a collective too, this one
	// or (when the ranks are out of step) another.
	Others []RankState
	// Missing are the ranks that did not answer within Config.Grace: busy or hung outside
	// any collective, or dead. They are the ranks the job waited for.
	Missing []int
}

func (e *StallError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mpi: rank %d of %d gave up on %s #%d after %v (%v)", e.Rank, e.Size, e.Op,
		e.Seq, e.Waited.Round(time.Millisecond), e.Cause)
	if len(e.Missing) > 0 {
		fmt.Fprintf(&b, "; %s never arrived (busy or hung outside MPI, or dead)", ranksText(e.Missing))
	}
	for _, s := range e.Others {
		b.WriteString("; ")
		b.WriteString(s.String())
		if s.Op != e.Op || s.Seq != e.Seq {
			b.WriteString(" (out of step)")
		}
	}
	b.WriteString("; the job cannot continue: call World.Abort")
	return b.String()
}

// Unwrap makes errors.Is match ErrStalled and the cause.
func (e *StallError) Unwrap() []error { return []error{ErrStalled, e.Cause} }

// GaveUpError is the cause of a StallError on a rank that was still waiting when another rank
// gave up on a collective and said so.
type GaveUpError struct{ RankState }

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("rank %d gave up while in %s #%d", e.Rank, e.Op, e.Seq)
}

// MismatchError is CheckSame's report: the ranks grouped by the hash they hold, the largest
// group first (ties: the group holding the lowest rank).
type MismatchError struct{ Groups []HashGroup }

// HashGroup is the ranks holding one hash.
type HashGroup struct {
	Hash  [32]byte
	Ranks []int
}

// Differ are the ranks outside the first (largest) group.
func (e *MismatchError) Differ() []int {
	var r []int
	for _, g := range e.Groups[1:] {
		r = append(r, g.Ranks...)
	}
	return r
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: ", ErrMismatch)
	for i, g := range e.Groups {
		if i > 0 {
			b.WriteString(", ")
		}
		verb := "has"
		if len(g.Ranks) > 1 {
			verb = "have"
		}
		fmt.Fprintf(&b, "%s %s %s…", ranksText(g.Ranks), verb, hex.EncodeToString(g.Hash[:8]))
	}
	fmt.Fprintf(&b, "; %s diverged (a non-deterministic update, different data or a missed update)",
		ranksText(e.Differ()))
	return b.String()
}

// Unwrap makes errors.Is match ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// ranksText is "rank 3" or "ranks 1, 4".
func ranksText(r []int) string {
	if len(r) == 1 {
		return fmt.Sprintf("rank %d", r[0])
	}
	s := make([]string, len(r))
	for i, x := range r {
		s[i] = fmt.Sprint(x)
	}
	return "ranks " + strings.Join(s, ", ")
}
