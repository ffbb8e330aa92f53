#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzXxx in a _test.go file) for FUZZTIME each (default 1m).
# Packages are found by their test files declaring a fuzz target, and each package's targets
# are listed with `go test -list '^Fuzz'`, so new targets are picked up without editing this.
# Arguments, if any, are the package patterns to search (default ./...). A failing target does
# not stop the others; the script fails at the end naming every one that failed (the input
# that broke it is saved under the package's testdata/fuzz/ by go test).
set -euo pipefail
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-1m}"
cd "$(dirname "$0")/.."

patterns=("$@")
[[ ${#patterns[@]} -gt 0 ]] || patterns=(./...)

# Packages whose test files declare a fuzz target (a cheap filter before compiling their tests).
mapfile -t pkgs < <("$GO" list -f '{{.ImportPath}}{{range .TestGoFiles}} {{$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$.Dir}}/{{.}}{{end}}' "${patterns[@]}" |
	while read -r pkg files; do
		if [[ -n "$files" ]] && grep -qE '^func Fuzz[A-Z0-9_]' $files; then
			echo "$pkg"
		fi
	done)

failed=()
total=0
for pkg in "${pkgs[@]}"; do
	if ! list="$("$GO" test -list '^Fuzz' "$pkg")"; then
		failed+=("$pkg (its tests do not build)")
		continue
	fi
	mapfile -t targets < <(grep -E '^Fuzz' <<<"$list" || true)
	for target in "${targets[@]}"; do
		total=$((total + 1))
		echo "fuzz: $pkg $target for $FUZZTIME" >&2
		if ! "$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg"; then
			failed+=("$pkg $target")
		fi
	done
done

if [[ $total -eq 0 ]]; then
	echo "fuzz: no fuzz targets found in ${patterns[*]}" >&2
	exit 1
fi
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'fuzz: %d of %d targets failed:\n' "${#failed[@]}" "$total" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "fuzz: all $total targets ran $FUZZTIME without a failure" >&2
