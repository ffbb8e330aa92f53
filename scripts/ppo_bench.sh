#!/usr/bin/env bash
# Issue 32's end-to-end PPO run, measured: CartPole-v1 with 2 workers × 256 envs, 2 towers,
# 4 epochs, 8 minibatches, 2M env steps,
#
#   bin/train --env CartPole-v1 --workers 2 --envs 256 --towers 2 --epochs 4 --minibatches 8 \
#       --total-steps 2000000 --seed S --matmul-precision P
#
# for each precision P (float32, the default, and bf16 where the CPU has AMX-BF16: on others
# bf16 runs float32 products and is left out), ROUNDS rounds, the precisions alternated within
# a round and their order reversed every other round, so that the VM's swings (±10–20% from
# hour to hour) fall on both alike. Each run prints its env steps/s end to end (train_seconds:
# start-up, collection and learning), the medians of its iterations' collection and learning
# times, its evaluation (10 deterministic episodes; CartPole-v1 counts 475 as solved) and its
# params_sha256. Then per precision: the range and median of env steps/s against the target of
# 800k, and the evaluations. Not part of make test; make bench-ppo runs it.
#
#   scripts/ppo_bench.sh [ROUNDS]     default 3 rounds
#
# Environment: SEEDS (default "0"; with several, each round runs each seed), PRECISIONS
# (default "float32 bf16"), STEPS (default 2000000), GO, KEEP=1 keeps the runs' directories.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
rounds="${1:-3}"
steps="${STEPS:-2000000}"
read -r -a seeds <<<"${SEEDS:-0}"
read -r -a precisions <<<"${PRECISIONS:-float32 bf16}"
target=800000

if ! [[ "$rounds" =~ ^[1-9][0-9]*$ ]]; then
	echo "ppo_bench: ROUNDS is $rounds; want a count of at least 1" >&2
	exit 2
fi
for p in "${precisions[@]}"; do
	if [[ "$p" != float32 && "$p" != bf16 ]]; then
		echo "ppo_bench: PRECISIONS names $p; want float32 and/or bf16" >&2
		exit 2
	fi
done
if (($(nproc) < 2)); then
	echo "ppo_bench: the run is 2 workers and 2 towers: needs 2 cores, this machine has $(nproc)" >&2
	exit 1
fi

tmp="$(mktemp -d)"
trap 'if [[ -n "${KEEP:-}" ]]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi' EXIT
source scripts/metrics_lib.sh

"$GO" build -o "$tmp/bin/" ./cmd/train

# median over the metrics lines of NAME, in milliseconds.
msmed() {
	# shellcheck disable=SC2046 # numbers separated by spaces
	median $(sed -n "s/.*\"$2\":\([0-9.eE+-]*\).*/\1/p" "$1/metrics.jsonl") | awk '{ printf "%.1f", 1000 * $1 }'
}

declare -A rates evals
n=0
run() { # run PRECISION SEED
	local p="$1" s="$2" dir out
	n=$((n + 1))
	dir="$tmp/run$n"
	if ! out="$("$tmp/bin/train" --env CartPole-v1 --workers 2 --envs 256 --towers 2 --epochs 4 --minibatches 8 \
		--total-steps "$steps" --seed "$s" --matmul-precision "$p" --no-tensorboard --out "$dir" 2>"$dir.log")"; then
		tail -n 20 "$dir.log" >&2
		exit 1
	fi
	if [[ "$p" == bf16 ]] && grep -q "has no AMX-BF16" "$dir.log"; then
		echo "  bf16: this CPU has no AMX-BF16 (the products stay float32); left out"
		skip_bf16=1
		return
	fi
	local sps ev sha
	sps="$(awk -v s="$(field "$out" env_steps)" -v t="$(field "$out" train_seconds)" 'BEGIN { printf "%.0f", s / t }')"
	ev="$(field "$out" eval_return_mean)"
	sha="$(sed -n 's/.*"params_sha256":"\([0-9a-f]\{8\}\).*/\1/p' <<<"$out")"
	rates[$p]+="$sps "
	evals[$p]+="$(printf '%.1f' "$ev") "
	printf '  %-8s seed %-3s %9s env steps/s  collect %5s ms  learn %5s ms a iteration  eval %6.1f  params %s\n' \
		"$p" "$s" "$sps" "$(msmed "$dir" collect_seconds)" "$(msmed "$dir" learn_seconds)" "$ev" "$sha"
}

skip_bf16=0
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
echo "CartPole-v1, 2 workers × 256 envs, 2 towers, 4 epochs, 8 minibatches, $steps env steps; $rounds rounds"
for ((r = 1; r <= rounds; r++)); do
	echo "round $r"
	mapfile -t order < <(in_turn "$r" "${precisions[@]}")
	for s in "${seeds[@]}"; do
		for p in "${order[@]}"; do
			if [[ "$p" == bf16 ]] && ((skip_bf16)); then
				continue
			fi
			run "$p" "$s"
		done
	done
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${precisions[@]}"; do
	if [[ -z "${rates[$p]:-}" ]]; then
		continue
	fi
	# shellcheck disable=SC2086 # numbers separated by spaces
	read -r lo hi med < <(printf '%s\n' ${rates[$p]} | sort -g | awk '{ v[NR] = $1 } END { print v[1], v[NR], v[int((NR + 1) / 2)] }')
	printf '%-8s env steps/s %s–%s (median %s; target %s: %s); evaluations %s\n' "$p" "$lo" "$hi" "$med" "$target" \
		"$(if ((lo >= target)); then echo "every run"; elif ((med >= target)); then echo "the median"; else echo "missed"; fi)" \
		"${evals[$p]% }"
done
