#!/usr/bin/env bash
# gofmt and go vet must be clean, and go.mod/go.sum tidy (go mod tidy -diff prints nothing).
set -euo pipefail
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [[ -n "$unformatted" ]]; then
	printf 'lint: gofmt would change:\n%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...
if ! tidy="$(go mod tidy -diff 2>&1)"; then
	printf 'lint: go.mod or go.sum is not tidy; run go mod tidy (keep the go4.org pin, see go.mod):\n%s\n' "$tidy" >&2
	exit 1
fi
