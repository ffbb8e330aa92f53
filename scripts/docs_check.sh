#!/usr/bin/env bash
# The docs checks of make test (docs/development.md): scripts/docscheck over README.md and
# docs/ (links and anchors, tool flags read from cmd/'s source, quoted examples, named files
# and make targets, the dependency list, docs/ pages named in Go files). Builds no tool.
# `go run ./scripts/docscheck -bin DIR` checks the flags against built tools' --help instead.
set -euo pipefail
cd "$(dirname "$0")/.."
"${GO:-go}" run ./scripts/docscheck
