#!/usr/bin/env bash
# Remote batchers' throughput (issue 18): env steps/s of a training run whose batchers are
# separate processes over loopback (train --serve, BATCHERS × batcher --connect) against the
# same run collected in-process (train --workers W --envs M: the same envs per iteration), and
# the transport's figures from the remote runs' metrics.jsonl (transport: bytes/s, per-rollout
# latency from publication to the learner taking it). Steps/s are the env steps trained
# between the first and last metrics lines (start-up, the first policy and the batchers'
# connection excluded). The two runs alternate REPEAT times, so that a burst of load from
# elsewhere on a shared machine hits both alike; the medians are the figures. Not part of
# make test.
#
#   scripts/remote_throughput.sh [BATCHERS [STEPS [REPEAT]]]    default 1 batcher, 1000000 steps, 3 times
#
# Environment: ALGO (default appo), ENV (CartPole-v1), WORKERS and ENVS (the run's workers ×
# envs per worker, default 1 × 24: each remote task, and the in-process batcher, steps that
# many envs), TRAIN_FLAGS (more train flags for both runs, e.g. "--max-policy-lag 4"),
# SERVE_FLAGS (more for the remote run, e.g. "--credits 3"), BATCHER_FLAGS (more for the
# batchers, e.g. "--codec none"), KEEP=1 keeps the runs, GO.
# With one batcher both runs step the same envs; with more, each remote batcher holds a task of
# that many envs and the credits (train --credits) bound how many collect at once.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
k="${1:-1}"
steps="${2:-1000000}"
repeat="${3:-3}"
algo="${ALGO:-appo}"
env="${ENV:-CartPole-v1}"
workers="${WORKERS:-1}"
envs="${ENVS:-24}"
read -r -a extra <<<"${TRAIN_FLAGS:-}"
read -r -a serve_extra <<<"${SERVE_FLAGS:-}"
read -r -a batcher_extra <<<"${BATCHER_FLAGS:-}"

tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	if [[ -n "${KEEP:-}" ]]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

"$GO" build -o "$tmp/bin/" ./cmd/train ./cmd/batcher
echo '{"eval_episodes": -1}' >"$tmp/config.json"
common=(--algo "$algo" --env "$env" --config "$tmp/config.json" --total-steps "$steps" --workers "$workers" --envs "$envs" --no-spin "${extra[@]}")

# field, rate, median
source scripts/metrics_lib.sh

# split RUNDIR: the learner's median time per iteration waiting for a rollout, learning and
# publishing.
split() {
	local f
	for f in collect learn publish; do
		sed -n "s/.*\"${f}_seconds\":\([0-9.eE+-]*\).*/\1/p" "$1/metrics.jsonl" | sort -g |
			awk -v f="$f" '{ v[NR] = $1 } END { printf "%s %.2f ms%s", f, 1000 * v[int((NR + 1) / 2)], (f == "publish" ? "" : ", ") }'
	done
}

# run_local N: the in-process run number N; prints its steps/s.
run_local() {
	local dir="$tmp/local-$1"
	"$tmp/bin/train" "${common[@]}" --out "$dir" >"$dir.json" 2>"$dir.log" || {
		cat "$dir.log" >&2
		exit 1
	}
}

# run_remote N: the remote run number N: a serving learner and K batcher processes.
run_remote() {
	local dir="$tmp/remote-$1" learner url i status=0
	"$tmp/bin/train" "${common[@]}" --out "$dir" --serve 127.0.0.1:0 --tasks "$k" "${serve_extra[@]}" \
		>"$dir.json" 2>"$dir.log" &
	learner=$!
	pids=("$learner")
	url=""
	for _ in $(seq 600); do
		url="$(grep -o 'nats://127\.0\.0\.1:[0-9]*' "$dir.log" | head -n 1 || true)"
		[[ -n "$url" ]] && break
		kill -0 "$learner" 2>/dev/null || break
		sleep 0.1
	done
	if [[ -z "$url" ]]; then
		echo "the learner did not start serving:" >&2
		cat "$dir.log" >&2
		exit 1
	fi
	for ((i = 0; i < k; i++)); do
		"$tmp/bin/batcher" --connect "$url" --creds "$dir/creds/batcher-$i.creds" --workers "$workers" "${batcher_extra[@]}" \
			>"$dir-b$i.json" 2>"$dir-b$i.log" &
		pids+=("$!")
	done
	wait "$learner" || status=$?
	for ((i = 1; i <= k; i++)); do
		wait "${pids[$i]}" || status=$?
	done
	pids=()
	if ((status != 0)); then
		tail -n 20 "$dir.log" "$dir"-b*.log >&2
		exit 1
	fi
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"
echo "$algo on $env, $steps env steps trained, $workers × $envs envs a rollout, $k batcher process(es), $repeat runs each"
local_sps=()
remote_sps=()
ratios=()
for ((n = 1; n <= repeat; n++)); do
	run_local "$n"
	run_remote "$n"
	l="$(rate "$tmp/local-$n")"
	r="$(rate "$tmp/remote-$n")"
	local_sps+=("$l")
	remote_sps+=("$r")
	ratios+=("$(awk -v r="$r" -v l="$l" 'BEGIN { printf "%.1f", (l > 0 ? 100 * r / l : 0) }')")
	printf 'run %d: in-process %7d env steps/s (%s); remote %7d env steps/s (%s): %s%%\n' "$n" "$l" "$(split "$tmp/local-$n")" \
		"$r" "$(split "$tmp/remote-$n")" "${ratios[-1]}"
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

# The transport over the remote runs: bytes/s over the metrics lines' span, the mean latency
# weighted by rollouts.
t_rollouts=0 t_bytes=0 t_lat=0 t_wall=0 trained=0 dropped=0 collected=0
for ((n = 1; n <= repeat; n++)); do
	dir="$tmp/remote-$n"
	read -r tr tb tl <<<"$(sed -n 's/.*"transport":{\([^}]*\)}.*/\1/p' "$dir/metrics.jsonl" | tr -d '"' | tr ',' ' ' | awk '
		{ for (i = 1; i <= NF; i++) { split($i, kv, ":"); v[kv[1]] = kv[2] }
		  n += v["rollouts"]; b += v["bytes"]; lat += v["latency_seconds"] * v["rollouts"] }
		END { printf "%d %d %.6f", n, b, lat }')"
	first="$(head -n 1 "$dir/metrics.jsonl")"
	last="$(tail -n 1 "$dir/metrics.jsonl")"
	t_rollouts=$((t_rollouts + tr))
	t_bytes=$((t_bytes + tb))
	t_lat="$(awk -v a="$t_lat" -v b="$tl" 'BEGIN { print a + b }')"
	t_wall="$(awk -v a="$t_wall" -v w0="$(field "$first" wall_seconds)" -v w1="$(field "$last" wall_seconds)" 'BEGIN { print a + w1 - w0 }')"
	sum="$(cat "$dir.json")"
	tr="$(field "$sum" rollouts_trained)"
	dr="$(field "$sum" rollouts_dropped)"
	trained=$((trained + ${tr:-0}))
	dropped=$((dropped + ${dr:-0}))
	for ((i = 0; i < k; i++)); do
		st="$(field "$(cat "$dir-b$i.json")" steps)"
		collected=$((collected + ${st:-0}))
	done
done

printf 'median: in-process %d env steps/s, remote %d env steps/s; remote / in-process %s%% (runs: %s)\n' \
	"$(median "${local_sps[@]}")" "$(median "${remote_sps[@]}")" "$(median "${ratios[@]}")" "${ratios[*]}"
printf 'remote rollouts: %d trained, %d dropped (too old); the batchers collected %d env steps for %d trained\n' \
	"$trained" "$dropped" "$collected" "$((repeat * steps))"
awk -v n="$t_rollouts" -v b="$t_bytes" -v lat="$t_lat" -v w="$t_wall" 'BEGIN {
	printf "transport: %d rollouts, %.1f MB on the wire (%.0f bytes a rollout), %.2f MB/s, %.2f ms mean latency from publication to the learner\n",
		n, b / 1e6, (n > 0 ? b / n : 0), (w > 0 ? b / w / 1e6 : 0), (n > 0 ? 1000 * lat / n : 0) }'
