#!/usr/bin/env bash
# The docs checks of make test (docs/development.md): builds the tools into a temporary folder
# and runs scripts/docscheck over README.md and docs/ (links, tool flags, quoted examples,
# named files and make targets, the dependency list). Seconds with a warm build cache.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/" ./cmd/...
"$GO" run ./scripts/docscheck -bin "$tmp"
