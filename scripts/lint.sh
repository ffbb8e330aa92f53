#!/usr/bin/env bash
# gofmt and go vet must be clean.
set -euo pipefail
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [[ -n "$unformatted" ]]; then
	printf 'lint: gofmt would change:\n%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...
