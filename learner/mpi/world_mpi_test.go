//go:build mpi && cgo

package mpi

// These tests run on every rank of a job: scripts/mpi_test.sh launches the test binary under
// mpirun -np 2 and -np 3 (and `go test -tags mpi` runs it as a job of one rank). Every rank
// reconstructs every other rank's buffers from the rank number, so each checks the result
// against a float64 reference on its own, and CheckSame of a hash of the result checks that
// the ranks hold the same bits. The scenarios that break the World (a hung rank, ranks out of
// step) run instead of the tests when -mpi.scenario names one; they end the job with Abort.

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

var (
	scenario = flag.String("mpi.scenario", "", "run a scenario that ends the job instead of the tests: hang, hangrollout or outofstep")
	spinFor  = flag.Duration("mpi.spin", 0, "Config.Spin of the World (0: the default)")
	report   = flag.String("mpi.report", "", "folder where each rank of a scenario writes its verdict, rank-N")
	world    *World
)

// abortPassed is the Abort code of a scenario whose checks passed on this rank.
const abortPassed = 3

func TestMain(m *testing.M) {
	flag.Parse()
	w, err := Init(Config{Spin: *spinFor})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	world = w
	switch *scenario {
	case "":
	case "hang":
		hangScenario(w, "allreduce-weighted", func(ctx context.Context) error {
			return w.AllReduceWeighted(ctx, make([]float32, 1000), 1)
		})
	case "hangrollout":
		// The last rank never finishes collecting: the others wait for it in FinishRollout.
		hangScenario(w, "finish-rollout", func(ctx context.Context) error {
			_, err := w.FinishRollout(ctx, 1)
			return err
		})
	case "outofstep":
		outOfStepScenario(w)
	default:
		fmt.Fprintf(os.Stderr, "mpi_test: unknown -mpi.scenario %q\n", *scenario)
		w.Abort(2)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "mpi_test: rank %d: tests failed; aborting the job\n", w.Rank())
		w.Abort(code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Finalize(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "mpi_test: rank %d: %v\n", w.Rank(), err)
		w.Abort(1)
	}
	if err := w.Finalize(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "mpi_test: rank %d: a second Finalize: %v\n", w.Rank(), err)
		os.Exit(1)
	}
	if err := w.Barrier(ctx); !errors.Is(err, ErrFinalized) {
		fmt.Fprintf(os.Stderr, "mpi_test: rank %d: Barrier after Finalize: got %v, want ErrFinalized\n", w.Rank(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// testCtx bounds every test's collectives, so a rank that fails a test early makes the others
// stall with an error instead of hanging.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rankBuf is rank r's buffer of n values in case k.
func rankBuf(r, n, k int) []float32 {
	b := make([]float32, n)
	for i := range b {
		b[i] = float32(math.Sin(float64(1+i*7+r*1009+k*97))*math.Exp(float64((i+r)%9-4))) + float32(r)
	}
	return b
}

func rankWeight(r int) float64 { return float64(16 * (r + 1) * (r + 2)) }

func hashOf(buf []float32) [32]byte {
	return sha256.Sum256(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), 4*len(buf)))
}

func TestRankSize(t *testing.T) {
	ctx := testCtx(t)
	r, n := world.Rank(), world.Size()
	if r < 0 || r >= n {
		t.Fatalf("rank %d of %d", r, n)
	}
	for _, tc := range []struct {
		op   Op
		in   func(r int) float64
		want float64
	}{
		{Sum, func(int) float64 { return 1 }, float64(n)},
		{Sum, func(r int) float64 { return float64(r) }, float64(n * (n - 1) / 2)},
		{Max, func(r int) float64 { return float64(r) }, float64(n - 1)},
		{Min, func(r int) float64 { return float64(10 - r) }, float64(10 - (n - 1))},
	} {
		buf := []float64{tc.in(r), -1}
		if err := world.AllReduceFloat64(ctx, tc.op, buf); err != nil {
			t.Fatal(err)
		}
		wantSecond := map[Op]float64{Sum: -float64(n), Max: -1, Min: -1}[tc.op]
		if buf[0] != tc.want || buf[1] != wantSecond {
			t.Errorf("%v: got %v, want [%v %v]", tc.op, buf, tc.want, wantSecond)
		}
	}
	if err := world.AllReduceFloat64(ctx, Op(9), []float64{1}); !errors.Is(err, ErrArgument) {
		t.Errorf("Op(9): got %v, want ErrArgument", err)
	}
	if err := world.AllReduceFloat64(ctx, Sum, nil); err != nil {
		t.Errorf("an empty buffer: %v", err)
	}
}

// TestAllReduceWeighted checks every element against Σ w_r·x_r / Σ w_r in float64 (at most one
// float32 ulp: MPI may sum in another order) and that every rank holds the same bits.
func TestAllReduceWeighted(t *testing.T) {
	ctx := testCtx(t)
	size := world.Size()
	for k, n := range []int{0, 1, 10_000, 1<<20 + 3} {
		weights := make([]float64, size)
		for r := range weights {
			weights[r] = rankWeight(r)
		}
		if size > 2 {
			weights[1] = 0 // a rank that collected nothing contributes nothing
		}
		buf := rankBuf(world.Rank(), n, k)
		if err := world.AllReduceWeighted(ctx, buf, weights[world.Rank()]); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		ref := make([]float64, n)
		var total float64
		for r := range size {
			total += weights[r]
			for i, x := range rankBuf(r, n, k) {
				ref[i] += weights[r] * float64(x)
			}
		}
		bad := 0
		for i, s := range ref {
			if want := float32(s / total); ulps(buf[i], want) > 1 {
				if bad++; bad <= 5 {
					t.Errorf("n=%d: element %d: got %v, want %v", n, i, buf[i], want)
				}
			}
		}
		if err := world.CheckSame(ctx, hashOf(buf)); err != nil {
			t.Errorf("n=%d: the ranks' results differ: %v", n, err)
		}
	}
}

// An invalid weight on one rank: every rank gets ErrArgument, no buffer changes, and the World
// stays usable.
func TestAllReduceWeightedInvalid(t *testing.T) {
	ctx := testCtx(t)
	last := world.Size() - 1
	for _, tc := range []struct {
		name   string
		weight func(r int) float64
	}{
		{"negative on the last rank", func(r int) float64 { return map[bool]float64{true: -2, false: 1}[r == last] }},
		{"NaN on the last rank", func(r int) float64 { return map[bool]float64{true: math.NaN(), false: 1}[r == last] }},
		{"all zero", func(int) float64 { return 0 }},
	} {
		buf := rankBuf(world.Rank(), 100, 5)
		before := slices.Clone(buf)
		if err := world.AllReduceWeighted(ctx, buf, tc.weight(world.Rank())); !errors.Is(err, ErrArgument) {
			t.Errorf("%s: got %v, want ErrArgument", tc.name, err)
		}
		if !slices.Equal(buf, before) {
			t.Errorf("%s: the buffer changed", tc.name)
		}
	}
	if err := world.AllReduceWeighted(ctx, rankBuf(world.Rank(), 100, 5), 1); err != nil {
		t.Errorf("after the refused calls: %v", err)
	}
}

// TestCollective: three towers per rank, each rank weighted by its sample count.
func TestCollective(t *testing.T) {
	ctx := testCtx(t)
	const towers, n = 3, 4099
	c, err := NewCollective(world, towers)
	if err != nil {
		t.Fatal(err)
	}
	rank, size := world.Rank(), world.Size()
	if err := c.SetWeight(rankWeight(rank)); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		bufs := make([][]float32, towers)
		errs := make([]error, towers)
		var wg sync.WaitGroup
		for m := range towers {
			bufs[m] = rankBuf(rank*towers+m, n, k)
			wg.Go(func() { errs[m] = c.AllReduce(ctx, m, bufs[m]) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", k, err)
		}
		var total float64
		ref := make([]float64, n)
		for r := range size {
			total += rankWeight(r)
			for m := range towers {
				for i, x := range rankBuf(r*towers+m, n, k) {
					ref[i] += rankWeight(r) * float64(x) / towers
				}
			}
		}
		for i, s := range ref {
			want := s / total
			if math.Abs(float64(bufs[0][i])-want) > 1e-6*math.Max(1, math.Abs(want)) {
				t.Fatalf("round %d element %d: got %v, want %v", k, i, bufs[0][i], want)
			}
		}
		for m := range bufs {
			if !slices.Equal(bufs[m], bufs[0]) {
				t.Fatalf("round %d: tower %d differs from tower 0", k, m)
			}
		}
		if err := world.CheckSame(ctx, hashOf(bufs[0])); err != nil {
			t.Fatalf("round %d: %v", k, err)
		}
	}
}

func TestBcast(t *testing.T) {
	ctx := testCtx(t)
	root := world.Size() - 1
	buf := make([]byte, 1000)
	for i := range buf {
		buf[i] = byte(i*7 + world.Rank()*13)
	}
	if err := world.Bcast(ctx, root, buf); err != nil {
		t.Fatal(err)
	}
	for i, b := range buf {
		if want := byte(i*7 + root*13); b != want {
			t.Fatalf("byte %d: got %d, want %d (root %d's)", i, b, want, root)
		}
	}
	params := rankBuf(world.Rank(), 5000, 8)
	if err := world.BcastFloat32(ctx, 0, params); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(params, rankBuf(0, 5000, 8)) {
		t.Error("BcastFloat32: the parameters are not rank 0's")
	}
	if err := world.Bcast(ctx, world.Size(), buf); !errors.Is(err, ErrArgument) {
		t.Errorf("root out of range: got %v, want ErrArgument", err)
	}
	if err := world.Barrier(ctx); err != nil {
		t.Error(err)
	}
}

func TestGather(t *testing.T) {
	ctx := testCtx(t)
	data := func(r int) []byte {
		d := make([]byte, 3*r+1)
		for i := range d {
			d[i] = byte(r*31 + i)
		}
		return d
	}
	for root := range world.Size() {
		got, err := world.Gather(ctx, root, data(world.Rank()))
		if err != nil {
			t.Fatal(err)
		}
		if world.Rank() != root {
			if got != nil {
				t.Errorf("root %d: rank %d got %d slices, want nil", root, world.Rank(), len(got))
			}
			continue
		}
		if len(got) != world.Size() {
			t.Fatalf("root %d: got %d slices, want %d", root, len(got), world.Size())
		}
		for r := range got {
			if !slices.Equal(got[r], data(r)) {
				t.Errorf("root %d: rank %d's data: got %v, want %v", root, r, got[r], data(r))
			}
		}
	}
}

func TestCheckSame(t *testing.T) {
	ctx := testCtx(t)
	h := sha256.Sum256([]byte("parameters"))
	if err := world.CheckSame(ctx, h); err != nil {
		t.Fatalf("equal hashes: %v", err)
	}
	last := world.Size() - 1
	if world.Rank() == last {
		h[5] ^= 1
	}
	err := world.CheckSame(ctx, h)
	if world.Size() == 1 {
		if err != nil {
			t.Errorf("one rank: %v", err)
		}
		return
	}
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("got %v, want a *MismatchError", err)
	}
	if !slices.Equal(me.Differ(), []int{last}) {
		t.Errorf("Differ = %v, want [%d]: %v", me.Differ(), last, err)
	}
}

// The weighted all-reduce, and a one-tower Collective, allocate nothing in steady state.
func TestAllocs(t *testing.T) {
	ctx := testCtx(t)
	buf := rankBuf(world.Rank(), 10_000, 1)
	c, err := NewCollective(world, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(20, func() {
		if err := world.AllReduceWeighted(ctx, buf, 2); err != nil {
			t.Fatal(err)
		}
		if err := c.AllReduce(ctx, 0, buf); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("allocated %v times per call", a)
	}
}

// TestFinishRollout: in each round the last rank "collects" until RolloutsFinished counts
// every other rank (which called FinishRollout at once), then finishes too; every rank gets
// every rank's steps. RolloutsFinished allocates nothing, and collectives around the rounds
// stay in step.
func TestFinishRollout(t *testing.T) {
	ctx := testCtx(t)
	r, n := world.Rank(), world.Size()
	for round := range 3 {
		if r == n-1 {
			for {
				k, err := world.RolloutsFinished()
				if err != nil {
					t.Fatal(err)
				}
				if k == n-1 {
					break
				}
				if k > n-1 || ctx.Err() != nil {
					t.Fatalf("round %d: RolloutsFinished = %d of %d other ranks", round, k, n-1)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		all, err := world.FinishRollout(ctx, int64(100*round+r))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range all {
			if v != int64(100*round+k) {
				t.Fatalf("round %d: FinishRollout = %v", round, all)
			}
		}
		if err := world.CheckSame(ctx, [32]byte{byte(round)}); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := world.RolloutsFinished(); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("RolloutsFinished allocated %v times per call", a)
	}
	if _, err := world.FinishRollout(ctx, 1); err != nil { // the polls above began this round
		t.Fatal(err)
	}
}

// hangScenario: the last rank never makes call (op); rank 0 gives up after 1 s, the other ranks (with
// 30 s deadlines) give up as soon as rank 0 says so. Every waiting rank checks its StallError,
// prints PASS or FAIL, and aborts the job; the hung rank is killed by the abort.
func hangScenario(w *World, op string, call func(context.Context) error) {
	rank, size := w.Rank(), w.Size()
	hung := size - 1
	if size < 2 {
		verdict(w, fmt.Sprintf("scenario hang in %s: FAIL: needs 2 or more ranks", op))
	}
	if rank == hung {
		fmt.Printf("mpi_test: rank %d: hanging outside MPI\n", rank)
		time.Sleep(60 * time.Second)
		fmt.Printf("mpi_test: rank %d: FAIL: still alive 60 s later: the others did not abort the job\n", rank)
		os.Exit(1)
	}
	timeout := 30 * time.Second
	if rank == 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	err := call(ctx)
	took := time.Since(begin)
	var problems []string
	var se *StallError
	if !errors.As(err, &se) {
		problems = append(problems, fmt.Sprintf("got %v, want a *StallError", err))
	} else {
		if !slices.Equal(se.Missing, []int{hung}) {
			problems = append(problems, fmt.Sprintf("Missing = %v, want [%d]", se.Missing, hung))
		}
		if len(se.Others) != size-2 {
			problems = append(problems, fmt.Sprintf("heard from %d ranks, want %d", len(se.Others), size-2))
		}
		for _, o := range se.Others {
			if o.Op != op || o.Seq != se.Seq || se.Op != op {
				problems = append(problems, fmt.Sprintf("rank %d reported in %s #%d", o.Rank, o.Op, o.Seq))
			}
		}
		var g *GaveUpError
		switch {
		case rank == 0 && !errors.Is(err, context.DeadlineExceeded):
			problems = append(problems, "rank 0's cause is not its deadline")
		case rank != 0 && (!errors.As(err, &g) || g.Rank != 0):
			problems = append(problems, "the cause is not rank 0 giving up")
		}
	}
	if took > 2500*time.Millisecond { // 1 s deadline + 250 ms grace, with room for a loaded machine
		problems = append(problems, fmt.Sprintf("took %v, want under 2.5 s", took))
	}
	if err2 := w.Barrier(context.Background()); !errors.Is(err2, ErrBroken) {
		problems = append(problems, fmt.Sprintf("a call after the stall: got %v, want ErrBroken", err2))
	}
	if len(problems) > 0 {
		verdict(w, fmt.Sprintf("scenario hang in %s: FAIL after %v: %v (error: %v)", op, took, problems, err))
	}
	verdict(w, fmt.Sprintf("scenario hang in %s: PASS after %v: %v", op, took.Round(time.Millisecond), err))
}

// verdict prints a scenario's verdict on this rank and writes it to -mpi.report/rank-N (output
// of a rank killed by another's abort can be lost on its way through mpirun; a file cannot),
// gives the other checking ranks time to do the same, and aborts the job: with abortPassed
// after a PASS.
func verdict(w *World, text string) {
	line := fmt.Sprintf("mpi_test: rank %d: %s\n", w.Rank(), text)
	fmt.Print(line)
	if *report != "" {
		if err := os.WriteFile(fmt.Sprintf("%s/rank-%d", *report, w.Rank()), []byte(line), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if strings.Contains(text, ": PASS") {
		w.Abort(abortPassed)
	}
	w.Abort(1)
}

// outOfStepScenario: rank 0 counts one call more than the others (as if it had made a call the
// others skipped); the next weighted all-reduce fails on every rank with ErrOutOfStep.
func outOfStepScenario(w *World) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rank := w.Rank()
	buf := rankBuf(rank, 100, 0)
	if err := w.AllReduceWeighted(ctx, buf, 1); err != nil {
		verdict(w, fmt.Sprintf("scenario outofstep: FAIL: the first call: %v", err))
	}
	if rank == 0 {
		w.mu.Lock()
		w.seq++
		w.mu.Unlock()
	}
	err := w.AllReduceWeighted(ctx, buf, 1)
	if w.Size() > 1 && !errors.Is(err, ErrOutOfStep) || w.Size() == 1 && err != nil {
		verdict(w, fmt.Sprintf("scenario outofstep: FAIL: got %v, want ErrOutOfStep", err))
	}
	verdict(w, fmt.Sprintf("scenario outofstep: PASS: %v", err))
}
