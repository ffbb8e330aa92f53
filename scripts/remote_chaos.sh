#!/usr/bin/env bash
# The remote batchers' chaos run (remote.TestChaos): a learner serves three CartPole tasks;
# three batcher processes publish rollouts while they are SIGKILLed at random moments and
# started again, and the learner is restarted twice on its store with rollouts handed out and
# unacknowledged. At the end every rollout a batcher's server confirmed stored must have been
# trained (acknowledged) once, and none twice; the counts are printed. Then the same with the
# built binaries, the learner SIGKILLed and resumed too (scripts/remote_chaos_train.sh:
# train --serve, train --resume on the same store, batcher --connect), which also checks that a
# learner waiting for batchers stops within 2 s of SIGTERM (exit 1, naming the resume command).
# Exits 1 on a loss, a rollout trained twice or a late stop.
#   scripts/remote_chaos.sh [SECONDS [RUNS]]   chaos for SECONDS (default 20), RUNS times (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
seconds="${1:-20}"
runs="${2:-1}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$GO" test -c -o "$tmp/remote.test" ./remote
status=0
for ((i = 1; i <= runs; i++)); do
	# From the package folder, as go test runs it (the policy is read from ../testdata).
	if ! (cd remote && TOWERRL_CHAOS_SECONDS="$seconds" "$tmp/remote.test" -test.run '^TestChaos$' -test.count 1 -test.v) >"$tmp/out" 2>&1; then
		status=1
	fi
	grep -E '^(--- |PASS|FAIL)|chaos_test.go' "$tmp/out" || true
	if ! GO="$GO" bash scripts/remote_chaos_train.sh "$seconds"; then
		status=1
	fi
done
exit "$status"
