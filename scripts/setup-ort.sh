#!/usr/bin/env bash
# Fetch ONNX Runtime 1.29.0 (CPU, Linux x64) into the per-user cache shared by every clone:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/towerrl/onnxruntime-1.29.0/libonnxruntime.so.1
# The library comes from Microsoft's npm package onnxruntime-node@1.29.0 (npm pack), and its sha256
# is checked. Idempotent: nothing is downloaded when a valid copy is already there. The install is
# atomic (temporary name, then rename), so concurrent runs from two clones are safe.
set -euo pipefail
# shellcheck source=scripts/npm-fetch.sh
source "$(dirname "$0")/npm-fetch.sh"

readonly ORT_VERSION=1.29.0
cache_root="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/towerrl"
npm_fetch "onnxruntime-node@${ORT_VERSION}" "about 112 MB" "${cache_root}/onnxruntime-${ORT_VERSION}" \
	"set TOWERRL_ORT_LIB to an ONNX Runtime ${ORT_VERSION} library" \
	package/bin/napi-v6/linux/x64/libonnxruntime.so.1 89688f5cf51c7e31befbb7b9101bc027799009b18d1baa9a5b1146a72e69538d
