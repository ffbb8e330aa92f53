#!/usr/bin/env bash
# The remote batchers' chaos run with the real binaries (issue 18): a learner (train --algo
# appo --serve) and 3 batcher processes (batcher --connect) train CartPole-v1 while the
# learner and the batchers are SIGKILLed at random moments; each batcher is started again at
# once and the learner resumed (train --resume DIR --serve ADDR, the same store). At the end
# the learner is stopped (SIGTERM); with the batchers stopped, a resumed learner waiting for
# them must stop within 2 s of SIGTERM (exit 1, naming the resume command); then it is resumed
# to finish a few more iterations (the batchers, started again, exit 0), and resumed once more
# with no batchers to list the rollouts left in the stream.
#
# Both programs keep a ledger (the test hook TOWERRL_TEST_LEDGER): a batcher the rollouts it
# published and the newest one the server confirmed stored; a learner the rollouts it was
# handed and acknowledged (trained, or dropped as too old: acknowledged either way). Every
# rollout confirmed stored must have been acknowledged by some learner, or be left in the
# stream at the end; none may have been acknowledged twice. An acknowledgement under way when
# its learner was killed ("acking" without "acked") counts once if no later learner was handed
# the rollout again (the server had it), and not at all if one was. Exits 1 on a loss or a
# rollout acknowledged twice, or when too little happened to tell.
#
#   scripts/remote_chaos_train.sh [SECONDS]    chaos for SECONDS (default 40)
#
# The learner's updates since its last checkpoint die with it (the rollouts they used were
# acknowledged): that is the documented cost of a kill, not a loss this run counts.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
seconds="${1:-40}"
k=3
tmp="$(mktemp -d)"
run="$tmp/run"
led="$tmp/ledgers"
mkdir -p "$led"
learner=""
declare -A batchers=()
cleanup() {
	[[ -n "$learner" ]] && kill -9 "$learner" 2>/dev/null || true
	for p in "${batchers[@]}"; do
		kill -9 "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	if [[ -n "${KEEP:-}" ]]; then
		echo "kept $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

"$GO" build -o "$tmp/bin/" ./cmd/train ./cmd/batcher
echo '{"eval_episodes": -1, "checkpoint_every": 5}' >"$tmp/config.json"

nlearner=0
addr="127.0.0.1:0"
# start_learner [FLAGS...]: a new learner, or a resumed one once the run directory has its
# config.json; its ledger, log and summary are numbered.
start_learner() {
	nlearner=$((nlearner + 1))
	local args
	if [[ -f "$run/config.json" ]]; then
		args=(--resume "$run")
	else
		args=(--algo appo --env CartPole-v1 --config "$tmp/config.json" --out "$run" --envs 8 --total-steps 100000000 --no-spin)
	fi
	TOWERRL_TEST_LEDGER="$led/learner-$(printf %03d "$nlearner")" "$tmp/bin/train" "${args[@]}" --serve "$addr" --tasks "$k" "$@" \
		>"$tmp/learner-$nlearner.json" 2>"$tmp/learner-$nlearner.log" &
	learner=$!
}

nbatcher=0
# start_batcher ID: a batcher process with a ledger of its own, and the credential the learner
# wrote for ID (DIR/creds/ID.creds: the ID comes from it).
start_batcher() {
	nbatcher=$((nbatcher + 1))
	TOWERRL_TEST_LEDGER="$led/batcher-$1-$(printf %03d "$nbatcher")" "$tmp/bin/batcher" --connect "nats://$addr" \
		--creds "$run/creds/$1.creds" --connect-timeout 0 >"$tmp/batcher-$nbatcher.json" 2>"$tmp/batcher-$nbatcher.log" &
	batchers[$1]=$!
}

start_learner
for _ in $(seq 600); do
	url="$(grep -o 'nats://127\.0\.0\.1:[0-9]*' "$tmp/learner-1.log" | head -n 1 || true)"
	[[ -n "$url" ]] && break
	sleep 0.1
done
if [[ -z "${url:-}" ]]; then
	cat "$tmp/learner-1.log" >&2
	exit 1
fi
addr="${url#nats://}" # the same address after every restart
for ((i = 0; i < k; i++)); do
	start_batcher "batcher-$i"
done

# Chaos: every 0.3–2.3 s a batcher or (one time in four, and not within 4 s of its last
# start) the learner is SIGKILLed and started again at once.
learner_kills=0
batcher_kills=0
end=$((SECONDS + seconds))
last_learner=$SECONDS
while ((SECONDS < end)); do
	sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.3 + 2 * r / 32767 }')"
	if ! kill -0 "$learner" 2>/dev/null; then
		echo "learner $nlearner exited by itself:" >&2
		tail -n 20 "$tmp/learner-$nlearner.log" >&2
		exit 1
	fi
	if ((RANDOM % 4 == 0 && SECONDS - last_learner >= 4)); then
		kill -9 "$learner"
		wait "$learner" 2>/dev/null || true
		learner_kills=$((learner_kills + 1))
		start_learner
		last_learner=$SECONDS
	else
		id="batcher-$((RANDOM % k))"
		kill -9 "${batchers[$id]}"
		wait "${batchers[$id]}" 2>/dev/null || true
		batcher_kills=$((batcher_kills + 1))
		start_batcher "$id"
	fi
done

# The end: a graceful stop, then a resumed learner that finishes 5 more iterations (the
# batchers exit 0 when it ends the run), then one with no batchers that lists what is left.
sleep 3 # the last learner started gets going
kill -TERM "$learner"
wait "$learner" 2>/dev/null || true
last="$(tail -n 1 "$run/metrics.jsonl")"
done_steps="$(sed -n 's/.*"env_steps":\([0-9]*\).*/\1/p' <<<"$last")"
cfg="$(cat "$run/config.json")"
iteration=1
for f in workers envs rollout_steps; do
	iteration=$((iteration * $(sed -n "s/.*\"$f\": *\([0-9]*\).*/\1/p" <<<"$cfg" | head -n 1)))
done
status=0

# SIGTERM while the learner waits for batchers (issue 28, item 1): with every batcher stopped,
# a resumed learner must stop within 2 s of SIGTERM, exit 1 and name the resume command; the
# run then goes on.
for id in "${!batchers[@]}"; do
	kill -9 "${batchers[$id]}" 2>/dev/null || true
	wait "${batchers[$id]}" 2>/dev/null || true
done
start_learner
for _ in $(seq 600); do
	grep -q 'serving [0-9]* collect tasks' "$tmp/learner-$nlearner.log" && break
	sleep 0.1
done
sleep 2 # it waits for rollouts now (those left in the stream trained first)
t0="$(date +%s%N)"
kill -TERM "$learner"
term_status=0
wait "$learner" || term_status=$?
stop_ms="$((($(date +%s%N) - t0) / 1000000))"
echo "SIGTERM while waiting for batchers: stopped in $stop_ms ms, exit $term_status"
if ((stop_ms > 2000)) || [[ "$term_status" != 1 ]] || ! grep -q 'continue it with: train --resume' "$tmp/learner-$nlearner.log"; then
	echo "a learner waiting for batchers did not stop within 2 s of SIGTERM with exit 1 and the resume command:" >&2
	tail -n 20 "$tmp/learner-$nlearner.log" >&2
	status=1
fi
for ((i = 0; i < k; i++)); do
	start_batcher "batcher-$i"
done

start_learner --total-steps "$((done_steps + 5 * iteration))"
if ! wait "$learner"; then
	echo "the final learner failed:" >&2
	tail -n 20 "$tmp/learner-$nlearner.log" >&2
	status=1
fi
for id in "${!batchers[@]}"; do
	if ! wait "${batchers[$id]}"; then
		echo "batcher $id did not exit 0 at the end of the run:" >&2
		tail -n 5 "$(ls -t "$tmp"/batcher-*.log | head -n 1)" >&2
		status=1
	fi
done
batchers=()
start_learner
if ! wait "$learner"; then
	echo "the draining learner failed:" >&2
	tail -n 20 "$tmp/learner-$nlearner.log" >&2
	status=1
fi
learner=""

# The accounting. A line cut by a kill (the file does not end in a newline) is dropped.
for f in "$led"/*; do
	if [[ -n "$(tail -c 1 "$f")" ]]; then
		sed -i '$ d' "$f"
	fi
done
# shellcheck disable=SC2016
awk -v learner_kills="$learner_kills" -v batcher_kills="$batcher_kills" -v learners="$nlearner" '
	FNR == 1 {
		n = split(FILENAME, p, "/"); name = p[n]
		# batcher-ID-NNN (the ID may hold dashes: batcher-0) or learner-NNN
		split(name, q, "-"); kind = q[1]; id = name; sub(/^[a-z]+-/, "", id); sub(/-[0-9]+$/, "", id); file++
	}
	kind == "batcher" && NF == 3 && $1 ~ /^[0-9a-f]+$/ {
		session[file] = id " " $1
		if ($2 > 0) published[file, $2] = 1
		if ($3 + 0 > last[file]) last[file] = $3 + 0
		bfiles[file] = 1
		next
	}
	kind == "learner" && NF == 4 {
		key = $2 " " $3 " " $4
		ord = q[2] + 0
		if ($1 == "delivered") { if ((ord, key) in handed) twice_handed++; handed[ord, key] = 1; seen[key] = seen[key] " " ord }
		else if ($1 == "acking") acking[ord, key] = 1
		else if ($1 == "acked") { acked[key]++; done[ord, key] = 1 }
		else if ($1 == "left") left[key] = 1
	}
	END {
		for (ok in acking) {
			split(ok, parts, SUBSEP); ord = parts[1]; key = parts[2]
			if ((ord, key) in done) continue
			later = 0; ns = split(seen[key], s, " ")
			for (i = 1; i <= ns; i++) if (s[i] + 0 > ord) later = 1
			if (!later) { acked[key]++; cut++ } # the server had it: not handed out again
		}
		for (f in bfiles) for (fk in published) {
			split(fk, parts, SUBSEP)
			if (parts[1] != f) continue
			seq = parts[2]
			if (seq > last[f]) continue # not confirmed stored: may die with its batcher
			confirmed++
			key = session[f] " " seq
			if (acked[key] == 0 && !(key in left)) {
				lost++
				if (lost <= 10) print "LOST: rollout " key " was confirmed stored and never acknowledged nor left in the stream" > "/dev/stderr"
			}
		}
		for (key in acked) {
			trained++
			if (acked[key] > 1) { twice++; if (twice <= 10) print "TWICE: rollout " key " acknowledged " acked[key] " times" > "/dev/stderr" }
		}
		for (key in left) nleft++
		printf "%d learner kills (%d learners with the final and draining ones), %d batcher kills; %d rollouts confirmed stored, %d acknowledged (%d by an acknowledgement cut by a kill), %d left in the stream; %d lost, %d acknowledged twice, %d handed twice to one learner\n",
			learner_kills, learners, batcher_kills, confirmed, trained, cut, nleft, lost, twice, twice_handed
		if (lost > 0 || twice > 0 || twice_handed > 0) exit 1
		if (learner_kills == 0 || batcher_kills == 0 || confirmed == 0) { print "the run did too little to test anything" > "/dev/stderr"; exit 1 }
	}' "$led"/batcher-* "$led"/learner-* || status=1
exit "$status"
