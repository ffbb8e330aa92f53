#!/usr/bin/env bash
# The MPI side of learner/mpi (build tag mpi), run under mpirun: the test binary as a job of one
# rank (no mpirun), under mpirun -np 2 and -np 3 (also built with -race), then the scenarios
# that must end a job: a hung rank, in a collective and in DD-PPO's rollout-finished exchange
# (every waiting rank must report it within seconds and the job must end), and ranks out of
# step; then DD-PPO with bin/train: one summary per job, straggler preemption, resumes, a rank
# killed, and SIGTERM to every rank (the ranks stop within 2 s with a checkpoint, and its resume
# ends with the uninterrupted run's policy.onnx, byte for byte). Fails, saying what to install,
# when Open MPI is missing.
#   scripts/mpi_test.sh          the tests
#   scripts/mpi_test.sh bench    the all-reduce latency benchmarks, 2 ranks
#   scripts/mpi_test.sh sigterm  the SIGTERM case alone
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"

if ! command -v mpirun >/dev/null || ! pkg-config --exists ompi-c 2>/dev/null; then
	echo "mpi_test: Open MPI is not installed (mpirun and pkg-config ompi-c are needed):" \
		"apt-get install openmpi-bin libopenmpi-dev" >&2
	exit 1
fi

# --bind-to none: Open MPI binds each rank to one core for np <= 2 (Go would see GOMAXPROCS=1).
mpirun=(mpirun --bind-to none --oversubscribe --tag-output)
if [[ $(id -u) == 0 ]]; then
	mpirun+=(--allow-run-as-root)
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# sigterm: a DD-PPO job on 2 ranks gets SIGTERM on every rank (as systemd or Kubernetes stop a
# job) mid-run: its ranks must stop within 2 s, with a checkpoint and the resume command; resumed on 2
# ranks it must end with the policy.onnx of the same run made without a stop, byte for byte
# (DD-PPO's resumes are exact).
sigterm() {
	local args=(--algo ddppo --env CartPole-v1 --total-steps 102400 --seed 4 --log-level warn)
	echo "mpi_test: ddppo, SIGTERM to every rank mid-run" >&2
	timeout 300 "${mpirun[@]}" -np 2 "$tmp/train" "${args[@]}" --out "$tmp/ddfull" >"$tmp/ddfull.out" 2>&1 ||
		{ cat "$tmp/ddfull.out" >&2; exit 1; }
	# Rank 0 lags 300 ms behind rank 1 between Finalize's barrier and MPI_Finalize, as a rank
	# descheduled there on a loaded machine does: rank 1's error exit must not make mpirun's
	# abort catch rank 0 inside MPI_Finalize (it would wait there 2 s for the abort).
	TOWERRL_TEST_FINALIZE_LAG=0:300ms "${mpirun[@]}" -np 2 "$tmp/train" "${args[@]}" --out "$tmp/ddterm" >"$tmp/ddterm.out" 2>&1 &
	local job=$! ranks t0 took rc=0
	while [[ ! -s "$tmp/ddterm/metrics.jsonl" ]] || (($(wc -l <"$tmp/ddterm/metrics.jsonl") < 20)); do
		kill -0 "$job" 2>/dev/null || { cat "$tmp/ddterm.out" >&2; echo "mpi_test: ddppo: the job ended before the signal" >&2; exit 1; }
		sleep 0.05
	done
	ranks=$(pgrep -P "$job" -x train || true)
	if [[ $(wc -w <<<"$ranks") != 2 ]]; then
		kill -KILL "$job" || true
		echo "mpi_test: ddppo: found ranks '$ranks', want 2" >&2
		exit 1
	fi
	t0=$(date +%s%N)
	# shellcheck disable=SC2086
	kill -TERM $ranks
	# The ranks' own stop is timed to their exit: a rank that has exited stays a zombie until
	# mpirun reaps it, so kill -0 would count mpirun's time too.
	local r alive=1 stopped=""
	while ((alive)) && (($(date +%s%N) - t0 < 10000000000)); do
		alive=0
		for r in $ranks; do
			[[ $(awk '/^State:/ {print $2}' "/proc/$r/status" 2>/dev/null) =~ ^[^ZX]$ ]] && alive=1
		done
		((alive)) && sleep 0.01
	done
	((alive)) || stopped=$((($(date +%s%N) - t0) / 1000000))
	while kill -0 "$job" 2>/dev/null && (($(date +%s%N) - t0 < 10000000000)); do sleep 0.02; done
	took=$((($(date +%s%N) - t0) / 1000000))
	if kill -0 "$job" 2>/dev/null; then
		kill -KILL "$job" || true
		rc=hung
	fi
	wait "$job" || rc=$?
	# Once a rank exits non-zero, Open MPI 4's mpirun aborts the job: it signals the ranks it has
	# not reaped yet and waits odls_base_sigkill_timeout (1 s) before a SIGKILL, once or twice,
	# so the job ends 0.1–2.2 s after ranks that all stopped (joinJob: 0.5 s after Finalize). The ranks' stop is
	# towerrl's and held to 2 s; the job's end to 2 s more than that.
	if [[ $rc == 0 || $rc == hung || -z $stopped ]] || ((stopped > 2000 || took > 4500)) ||
		! grep -q "train --resume $tmp/ddterm" "$tmp/ddterm.out"; then
		cat "$tmp/ddterm.out" >&2
		echo "mpi_test: ddppo: SIGTERM to both ranks: the ranks exited after ${stopped:-more than 10000} ms and the job ended with $rc after ${took} ms (want the ranks to stop with the resume command within 2000 ms, and mpirun to end the job within 4500)" >&2
		exit 1
	fi
	local at
	at=$(wc -l <"$tmp/ddterm/metrics.jsonl")
	echo "mpi_test: ddppo: SIGTERM stopped the ranks after iteration $at in ${stopped} ms; mpirun ended the job in ${took} ms" >&2
	timeout 300 "${mpirun[@]}" -np 2 "$tmp/train" --resume "$tmp/ddterm" --log-level warn >"$tmp/ddterm2.out" 2>&1 ||
		{ cat "$tmp/ddterm2.out" >&2; echo "mpi_test: ddppo: the resume after SIGTERM failed" >&2; exit 1; }
	if ! cmp -s "$tmp/ddfull/policy.onnx" "$tmp/ddterm/policy.onnx"; then
		echo "mpi_test: ddppo: the run stopped by SIGTERM and resumed ends with another policy.onnx than the uninterrupted run" >&2
		exit 1
	fi
	if [[ $(grep -c params_sha256 "$tmp/ddterm2.out") != 1 ]]; then
		cat "$tmp/ddterm2.out" >&2
		echo "mpi_test: ddppo: want one JSON summary for the job (rank 0's)" >&2
		exit 1
	fi
	echo "mpi_test: ddppo: resumed after SIGTERM to the uninterrupted run's policy.onnx, byte for byte" >&2
}
if [[ "${1:-}" == sigterm ]]; then
	"$GO" build -tags mpi -o "$tmp/train" ./cmd/train
	sigterm
	exit
fi

bin="$tmp/mpi.test"
"$GO" vet -tags mpi ./learner/mpi
"$GO" test -c -tags mpi -o "$bin" ./learner/mpi

if [[ "${1:-}" == bench ]]; then
	# Collective benchmarks need the same iteration count on every rank: a fixed count.
	"${mpirun[@]}" -np 2 "$bin" -test.run '^$' -test.bench . -test.benchtime "${BENCHTIME:-1000x}"
	exit
fi

echo "mpi_test: one rank, without mpirun" >&2
timeout 300 "$bin" -test.count=1

"$GO" test -c -race -tags mpi -o "$tmp/mpi.race.test" ./learner/mpi
for np in 2 3; do
	for b in "$bin" "$tmp/mpi.race.test"; do
		echo "mpi_test: mpirun -np $np $(basename "$b")" >&2
		timeout 300 "${mpirun[@]}" -np "$np" "$b" -test.count=1
	done
done

# The scenarios end the job with MPI_Abort: code 3 from a rank whose checks passed (so mpirun
# exits 3), 1 from one whose checks failed. Every rank that checks writes its verdict into the
# report folder (its output through mpirun may be cut off by another rank's abort).
# scenario NAME NP CHECKERS MAXSECONDS
scenario() {
	local name=$1 np=$2 want=$3 maxs=$4 out="$tmp/$1.$2.out" report="$tmp/$1.$2" rc=0
	echo "mpi_test: scenario $name, mpirun -np $np" >&2
	mkdir "$report"
	local t0=$SECONDS
	timeout 120 "${mpirun[@]}" -np "$np" "$bin" -mpi.scenario "$name" -mpi.report "$report" >"$out" 2>&1 || rc=$?
	local took=$((SECONDS - t0)) passes
	passes=$(cat "$report"/rank-* 2>/dev/null | grep -c ": PASS" || true)
	if [[ $rc != 3 || $passes != "$want" ]] || grep -q "FAIL" "$out" "$report"/rank-* || ((took > maxs)); then
		cat "$out" "$report"/rank-* >&2 || true
		echo "mpi_test: scenario $name (np $np): FAIL: mpirun exit $rc (want 3), $passes passing ranks" \
			"(want $want), ${took}s (at most ${maxs}s)" >&2
		exit 1
	fi
	cat "$report"/rank-* >&2
}
for np in 2 3; do
	scenario hang "$np" $((np - 1)) 15
	scenario hangrollout "$np" $((np - 1)) 15
	scenario outofstep "$np" "$np" 15
done
# DD-PPO end to end with the real tool (bin/train built with MPI): two ranks train, rank 0
# alone writes the run; the run resumes under the same number of ranks and is refused under
# another; a rank killed with SIGKILL ends the whole job within seconds.
"$GO" build -tags mpi -o "$tmp/train" ./cmd/train
dd="$tmp/ddppo"
echo "mpi_test: ddppo, mpirun -np 2 train" >&2
timeout 120 "${mpirun[@]}" -np 2 "$tmp/train" --algo ddppo --env CartPole-v1 --total-steps 10240 --seed 3 \
	--out "$dd" --log-level warn >"$tmp/ddppo.out" 2>&1 || { cat "$tmp/ddppo.out" >&2; exit 1; }
lines=$(wc -l <"$dd/metrics.jsonl")
if [[ $lines != 10 ]] || ! grep -q '"env_steps":10240' "$dd/metrics.jsonl"; then
	cat "$tmp/ddppo.out" >&2
	echo "mpi_test: ddppo: $lines metrics lines (want 10, the last at 10240 steps over both ranks)" >&2
	exit 1
fi
# Straggler preemption: rank 1 collects 3× slower (the test hook); with --sync-frac 0.5 it is
# cut short once rank 0 has finished, never below a quarter of the rollout, rank 0's metrics
# say so, env_steps counts the steps both ranks took, and both ranks end with one parameter hash.
echo "mpi_test: ddppo, straggler preemption (rank 1 slowed 3×, --sync-frac 0.5)" >&2
TOWERRL_TEST_SLOWDOWN=1:3 timeout 120 "${mpirun[@]}" -np 2 "$tmp/train" --algo ddppo --env CartPole-v1 --total-steps 10240 \
	--seed 3 --sync-frac 0.5 --out "$tmp/ddpre" --log-level warn >"$tmp/ddpre.out" 2>&1 || { cat "$tmp/ddpre.out" >&2; exit 1; }
if ! python3 - "$tmp/ddpre/metrics.jsonl" >&2 <<'PY'
import json, sys
ms = [json.loads(l) for l in open(sys.argv[1])]
steps, cut = 0, 0
for m in ms:
    f = m["preemption"]["collected_frac"]
    assert len(f) == 2 and max(f) == 1 and min(f) >= 0.25, f
    steps += round(sum(f) * 512)
    cut += m["preemption"]["preempted"]
    assert m["env_steps"] == steps, (m["env_steps"], steps)
assert len(ms) == 10 and cut > 0, (len(ms), cut)
print(f"mpi_test: ddppo: {cut} of 10 rollouts of the slowed rank cut short; it collected {sum(m['preemption']['collected_frac'][1] for m in ms)/10:.2f} of each on average")
PY
then
	cat "$tmp/ddpre.out" >&2
	echo "mpi_test: ddppo: the preemption metrics are wrong (above)" >&2
	exit 1
fi
# One job, one summary: rank 0's. The ranks' parameters are compared by the engine at every
# checkpoint and at the end (a difference ends the run with an error).
if [[ $(grep -c params_sha256 "$tmp/ddpre.out") != 1 ]]; then
	cat "$tmp/ddpre.out" >&2
	echo "mpi_test: ddppo: want one JSON summary for the job (rank 0's)" >&2
	exit 1
fi
rc=0
timeout 120 "${mpirun[@]}" -np 3 "$tmp/train" --resume "$dd" --total-steps 20480 --log-level warn >"$tmp/ddppo3.out" 2>&1 || rc=$?
if [[ $rc == 0 ]] || ! grep -q "written by 2 ranks" "$tmp/ddppo3.out"; then
	cat "$tmp/ddppo3.out" >&2
	echo "mpi_test: ddppo: a resume with 3 ranks of a 2-rank run was not refused (exit $rc)" >&2
	exit 1
fi
timeout 120 "${mpirun[@]}" -np 2 "$tmp/train" --resume "$dd" --total-steps 20480 --log-level warn >"$tmp/ddppo2.out" 2>&1 ||
	{ cat "$tmp/ddppo2.out" >&2; exit 1; }
if [[ $(wc -l <"$dd/metrics.jsonl") != 20 ]]; then
	cat "$tmp/ddppo2.out" >&2
	echo "mpi_test: ddppo: the resumed run has $(wc -l <"$dd/metrics.jsonl") metrics lines (want 20)" >&2
	exit 1
fi
echo "mpi_test: ddppo, SIGKILL of one rank mid-run" >&2
"${mpirun[@]}" -np 2 "$tmp/train" --algo ddppo --env CartPole-v1 --total-steps 100000000 \
	--out "$tmp/ddkill" --log-level warn >"$tmp/ddkill.out" 2>&1 &
job=$!
sleep 4
victim=$(pgrep -P "$job" -x train | tail -n 1 || true)
if [[ -z $victim ]]; then
	cat "$tmp/ddkill.out" >&2
	echo "mpi_test: ddppo: no rank of the job to kill" >&2
	kill "$job" || true
	exit 1
fi
kill -KILL "$victim"
t0=$SECONDS
while kill -0 "$job" 2>/dev/null && ((SECONDS - t0 < 20)); do sleep 0.2; done
took=$((SECONDS - t0))
rc=0
if kill -0 "$job" 2>/dev/null; then
	kill -KILL "$job" || true
	rc=hung
fi
wait "$job" || rc=$?
if [[ $rc == 0 || $rc == hung ]] || ((took > 15)); then
	cat "$tmp/ddkill.out" >&2
	echo "mpi_test: ddppo: after rank pid $victim was killed the job ended with $rc after ${took}s (want an error within 15 s)" >&2
	exit 1
fi
echo "mpi_test: ddppo: a killed rank ended the job in ${took}s (mpirun exit $rc)" >&2
# The killed run resumes from its last checkpoint on 2 ranks and trains 20 more iterations.
done_steps=$(tail -n 1 "$tmp/ddkill/metrics.jsonl" | sed 's/.*"env_steps":\([0-9]*\).*/\1/')
timeout 120 "${mpirun[@]}" -np 2 "$tmp/train" --resume "$tmp/ddkill" --total-steps $((done_steps + 20480)) \
	--log-level warn >"$tmp/ddresume.out" 2>&1 || { cat "$tmp/ddresume.out" >&2; echo "mpi_test: ddppo: the resume after the kill failed" >&2; exit 1; }
if ! grep -q "\"env_steps\":$((done_steps + 20480))" "$tmp/ddkill/metrics.jsonl"; then
	cat "$tmp/ddresume.out" >&2
	echo "mpi_test: ddppo: the resumed run did not reach $((done_steps + 20480)) steps" >&2
	exit 1
fi
if [[ $(grep -c params_sha256 "$tmp/ddresume.out") != 1 ]]; then
	cat "$tmp/ddresume.out" >&2
	echo "mpi_test: ddppo: want one JSON summary for the job (rank 0's)" >&2
	exit 1
fi
echo "mpi_test: ddppo: resumed after the kill to $((done_steps + 20480)) steps" >&2
sigterm
echo "mpi_test: ok" >&2
