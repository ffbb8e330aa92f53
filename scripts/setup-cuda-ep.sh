#!/usr/bin/env bash
# Fetch ONNX Runtime 1.29.0's CUDA execution provider plugin (built against CUDA 13) into the
# per-user cache, beside the core library that `make setup` installs:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/towerrl/onnxruntime-1.29.0/libonnxruntime_providers_cuda.so
#   ${XDG_CACHE_HOME:-$HOME/.cache}/towerrl/onnxruntime-1.29.0/libonnxruntime_providers_shared.so
# They come from the npm package com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9 (179 MB), and
# both sha256 sums are checked. At run time the plugin needs the CUDA 13 user-space libraries
# (libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libcurand.so.10, cuDNN 9) on
# LD_LIBRARY_PATH and an NVIDIA driver for CUDA 13. Idempotent and atomic, as `make setup`.
set -euo pipefail
# shellcheck source=scripts/npm-fetch.sh
source "$(dirname "$0")/npm-fetch.sh"

readonly ORT_VERSION=1.29.0
cache_root="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/towerrl"
npm_fetch "com.github.asus4.onnxruntime.linux-x64-gpu@0.4.9" "about 179 MB" "${cache_root}/onnxruntime-${ORT_VERSION}" \
	"set onnx.Config.CUDAProviderLibrary to an ONNX Runtime ${ORT_VERSION} CUDA provider plugin" \
	package/Plugins/Linux/x64/libonnxruntime_providers_cuda.so 56cf3254b118ad837ccc4ed8f6d1b23504bbf7ef91b34cbc0b289cb7f10b3037 \
	package/Plugins/Linux/x64/libonnxruntime_providers_shared.so c6a12593396095f5670160e284c35d1700b7708cf3037b7042e2a5200ccae772
