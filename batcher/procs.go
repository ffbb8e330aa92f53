package batcher

import (
	"os"
	"runtime"
)

// ReserveProcs raises GOMAXPROCS to workers + 1 when it is lower and the GOMAXPROCS
// environment variable does not set it, and returns the value it had and whether it changed
// it. A process whose batchers run workers policy workers in all calls it once, before the
// batchers start (cmd/batcher does); a random policy makes no inference calls and needs none.
//
// Why: a worker spends most of a step inside ONNX Runtime, a cgo call that keeps its P. While
// no P is idle, Go's sysmon thread takes the P back from a call after one 20 µs tick, finds
// it had work to do, and keeps polling at that tick instead of backing off towards 10 ms.
// Two workers in one process of GOMAXPROCS 2 leave no P idle; two processes of one worker
// each always do. Measured in one process collecting CartPole with the 64×64 MLP, two
// workers of 1024 envs, GOMAXPROCS 2 and 3 alternated over 6 runs on the shared 2-core
// machine (load average 4–5): sysmon's thread woke 3.2–4.4 times per inference call
// against 1.4–2.7, the process took 2.3–4.4 involuntary context switches per call against
// 0.7–3.1 (each a worker preempted on cores the workers fill), and 10–37 ns of system time
// per env step against 6–24. The spare P costs nothing while idle: ONNX Runtime makes no
// threads of its own at one intra-op thread, and the workers never need more Ps than there
// are workers. scripts/batcher_bench.sh's "w2 procs=cores" shape is the A/B.
func ReserveProcs(workers int) (previous int, changed bool) {
	previous = runtime.GOMAXPROCS(0)
	if _, set := os.LookupEnv("GOMAXPROCS"); set || workers < 1 || previous > workers {
		return previous, false
	}
	runtime.GOMAXPROCS(workers + 1)
	return previous, true
}
