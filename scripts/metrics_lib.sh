# Shell helpers for the measurement scripts (sourced): reading a run's metrics.jsonl.

# field LINE NAME: the number after "NAME": in LINE (the first occurrence).
field() {
	sed -n "s/.*\"$2\":\(-\{0,1\}[0-9.eE+-]*\).*/\1/p" <<<"$1" | head -n 1
}

# rate RUNDIR: env steps/s between the first and last metrics lines (start-up excluded).
rate() {
	local first last
	first="$(head -n 1 "$1/metrics.jsonl")"
	last="$(tail -n 1 "$1/metrics.jsonl")"
	awk -v s0="$(field "$first" env_steps)" -v s1="$(field "$last" env_steps)" \
		-v w0="$(field "$first" wall_seconds)" -v w1="$(field "$last" wall_seconds)" \
		'BEGIN { if (w1 > w0) printf "%.0f", (s1 - s0) / (w1 - w0); else print 0 }'
}

# total RUNDIR NAME: the sum of NAME over the metrics lines.
total() {
	sed -n "s/.*\"$2\":\([0-9.eE+-]*\).*/\1/p" "$1/metrics.jsonl" | awk '{ s += $1 } END { printf "%.3f", s }'
}

# median of the arguments.
median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# in_turn ROUND ITEMS...: the items one a line, in their order in odd rounds and reversed in
# even ones, so that load from elsewhere falls on all of them alike over the rounds.
in_turn() {
	local round="$1" i
	shift
	local items=("$@")
	if ((round % 2 == 0)); then
		for ((i = ${#items[@]} - 1; i >= 0; i--)); do
			echo "${items[i]}"
		done
	else
		printf '%s\n' "${items[@]}"
	fi
}
