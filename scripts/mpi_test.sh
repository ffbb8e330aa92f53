#!/usr/bin/env bash
# The MPI side of learner/mpi (build tag mpi), run under mpirun: the test binary as a job of one
# rank (no mpirun), under mpirun -np 2 and -np 3 (also built with -race), then the scenarios
# that must end a job: a hung rank (every waiting rank must report it within seconds and the
# job must end) and ranks out of step. Fails, saying what to install, when Open MPI is missing.
#   scripts/mpi_test.sh          the tests
#   scripts/mpi_test.sh bench    the all-reduce latency benchmarks, 2 ranks
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
	scenario outofstep "$np" "$np" 15
done
echo "mpi_test: ok" >&2
