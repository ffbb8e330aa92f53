#!/usr/bin/env bash
# Regenerates kernels.ptx from kernels.cu (go generate ./internal/cuda). Needs nvcc (CUDA 11.8
# or later: Debian's nvidia-cuda-toolkit here); CI never runs it, and the PTX is committed.
set -euo pipefail
cd "$(dirname "$0")"
nvcc --ptx -arch=sm_90 -O3 -o kernels.ptx kernels.cu
