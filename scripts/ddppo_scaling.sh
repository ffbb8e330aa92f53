#!/usr/bin/env bash
# DD-PPO's scaling (issue 17): env steps/s of `train --algo ddppo` on 2 ranks, one core each
# (mpirun -np 2 --bind-to core), against 1 rank on one core (taskset -c 0) with the same
# envs per rank, so that 2 ranks collect and learn on twice the rows per iteration. Steps/s
# are the env steps between the first and last metrics lines (start-up excluded); the
# all-reduce time per update is the mean of the 2-rank run's allreduce_us_per_update. The
# two alternate REPEAT times, so that load from elsewhere hits both alike;
# the medians are the figures. Needs Open MPI (apt-get install openmpi-bin libopenmpi-dev).
# Not part of make test.
#
#   scripts/ddppo_scaling.sh [ENVS [STEPS [REPEAT]]]    default 64 envs per rank, 1000000 steps, 3 times
#
# Environment: ENV (CartPole-v1), TRAIN_FLAGS (more train flags for both), KEEP=1 keeps the
# runs, GO. Each update trains a minibatch of ENVS × 128 / 4 rows per rank (the discrete
# defaults: 128 steps, 4 minibatches, 4 epochs): the smaller it is, the larger the share of
# the all-reduce each update makes (see the README's DD-PPO section).
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
envs="${1:-64}"
steps="${2:-1000000}"
repeat="${3:-3}"
env="${ENV:-CartPole-v1}"
read -r -a extra <<<"${TRAIN_FLAGS:-}"

if ! command -v mpirun >/dev/null || ! pkg-config --exists ompi-c 2>/dev/null; then
	echo "ddppo_scaling: Open MPI is not installed (mpirun and pkg-config ompi-c are needed):" \
		"apt-get install openmpi-bin libopenmpi-dev" >&2
	exit 1
fi
if (($(nproc) < 2)); then
	echo "ddppo_scaling: needs 2 cores, this machine has $(nproc)" >&2
	exit 1
fi
mpirun=(mpirun -np 2 --bind-to core)
if [[ $(id -u) == 0 ]]; then
	mpirun+=(--allow-run-as-root)
fi

tmp="$(mktemp -d)"
trap 'if [[ -n "${KEEP:-}" ]]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi' EXIT
source scripts/metrics_lib.sh

"$GO" build -tags mpi -o "$tmp/bin/" ./cmd/train
echo '{"eval_episodes": -1}' >"$tmp/config.json"
common=(--algo ddppo --env "$env" --config "$tmp/config.json" --total-steps "$steps" --envs "$envs" --towers 1 --seed 1 "${extra[@]}")

# run NAME COMMAND...: one training run into $tmp/NAME; fails with its log.
run() {
	local dir="$tmp/$1"
	shift
	"$@" "${common[@]}" --out "$dir" >"$dir.out" 2>&1 || {
		tail -n 20 "$dir.out" >&2
		exit 1
	}
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
echo "ddppo on $env, $steps env steps, $envs envs per rank, $repeat runs each"
one=()
two=()
ratios=()
for ((n = 1; n <= repeat; n++)); do
	run "one-$n" taskset -c 0 "$tmp/bin/train"
	run "two-$n" "${mpirun[@]}" "$tmp/bin/train"
	a="$(rate "$tmp/one-$n")"
	b="$(rate "$tmp/two-$n")"
	one+=("$a")
	two+=("$b")
	ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (a > 0 ? b / a : 0) }')")
	iters="$(wc -l <"$tmp/two-$n/metrics.jsonl")"
	per="$(total "$tmp/two-$n" allreduce_us_per_update)"
	printf 'run %d: 1 rank %7d env steps/s; 2 ranks %7d env steps/s (all-reduce %.0f µs per update): %s×\n' "$n" "$a" "$b" \
		"$(awk -v s="$per" -v n="$iters" 'BEGIN { print s / n }')" "${ratios[-1]}"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "median: 1 rank $(median "${one[@]}"), 2 ranks $(median "${two[@]}") env steps/s: $(median "${ratios[@]}")× (target 1.7×)"
