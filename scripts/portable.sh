#!/usr/bin/env bash
# Portability checks run by `make test`, so that the native code stays removable:
#   1. the packages that use it, tested with it switched off: the pure-Go kernels (purego) and
#      gorgonia's own RunAll instead of the linkname fast path (towerrl_runall);
#   2. every package that does not need ONNX Runtime, built and vetted for arm64 without cgo;
#   3. where qemu-aarch64-static is installed, the kernels' tests run as arm64 code (Go fuses
#      multiply-adds there, which Adam's bit-identity must survive); skipped, saying so, where not.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"

echo "portable: tests with -tags purego,towerrl_runall" >&2
"$GO" test -count=1 -short -tags purego,towerrl_runall \
	./internal/kernels ./internal/tape ./internal/spin ./learner ./models

# The packages that must cross-build: everything under these patterns except the ones below.
patterns=(./envs/... ./device/... ./learner/... ./models/... ./internal/...)
# Packages under the patterns that still link ONNX Runtime (onnxruntime_go needs cgo), and why.
# Take a package out of this list once it no longer does; the script says when one builds.
declare -A needs_ort=(
	[github.com/towerrl/towerrl/learner/cudatower]="imports engine/algo, whose ReplayLearner names bind.Param (bind links ONNX Runtime)"
)
# Packages that cross-build but whose tests import packages that need ONNX Runtime, so go vet
# (which type-checks the tests) cannot run on them for arm64.
declare -A tests_need_ort=(
	[github.com/towerrl/towerrl/learner]="tests import engine and models"
	[github.com/towerrl/towerrl/learner/cudatower]="tests import engine (the CPU tower they compare with)"
	[github.com/towerrl/towerrl/models]="tests run the exported ONNX with onnx sessions"
	[github.com/towerrl/towerrl/models/layout]="tests run exposed graphs with onnx sessions"
)

mapfile -t all < <("$GO" list "${patterns[@]}")
build=() vet=()
for p in "${all[@]}"; do
	if [[ -n "${needs_ort[$p]:-}" ]]; then
		if GOARCH=arm64 CGO_ENABLED=0 "$GO" build -o /dev/null "$p" 2>/dev/null; then
			echo "portable: note: $p now builds for arm64 without cgo: remove it from needs_ort in $0" >&2
		fi
		continue
	fi
	build+=("$p")
	[[ -n "${tests_need_ort[$p]:-}" ]] || vet+=("$p")
done

# Without MuJoCo (no mujoco tag): everything builds and vets, and the MuJoCo ids say how to get
# them.
echo "portable: go build, go vet and envs/mujoco's tests without the mujoco tag" >&2
GOFLAGS= "$GO" build ./...
GOFLAGS= "$GO" vet ./envs/... ./cmd/...
GOFLAGS= "$GO" test -count=1 ./envs/mujoco

echo "portable: GOARCH=arm64 CGO_ENABLED=0 go build of ${#build[@]} packages, go vet of ${#vet[@]}" >&2
GOARCH=arm64 CGO_ENABLED=0 "$GO" build "${build[@]}"
GOARCH=arm64 CGO_ENABLED=0 "$GO" vet "${vet[@]}"

if command -v qemu-aarch64-static >/dev/null; then
	echo "portable: arm64 kernel tests under qemu-aarch64-static" >&2
	GOARCH=arm64 CGO_ENABLED=0 "$GO" test -count=1 -exec qemu-aarch64-static ./internal/kernels
else
	echo "portable: skipped the arm64 kernel tests: qemu-aarch64-static is not installed" \
		"(apt-get install qemu-user-static)" >&2
fi
