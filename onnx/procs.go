package onnx

import (
	"os"
	goruntime "runtime"
)

// ReserveProcs raises GOMAXPROCS to callers + 1 when it is lower and the GOMAXPROCS
// environment variable does not set it, and returns the value it had and whether it changed
// it. callers is how many goroutines of the process run sessions at once, each most of its
// time inside [Session.Run]: a batcher's workers (cmd/batcher calls it with --workers), or
// infer's --sessions. Call it once, before they start.
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
// are workers. scripts/batcher_bench.sh's "w2 procs=cores" and "ort 2 sessions procs=cores"
// shapes are the A/B.
func ReserveProcs(callers int) (previous int, changed bool) {
	previous = goruntime.GOMAXPROCS(0)
	if _, set := os.LookupEnv("GOMAXPROCS"); set || callers < 1 || previous > callers {
		return previous, false
	}
	goruntime.GOMAXPROCS(callers + 1)
	return previous, true
}
