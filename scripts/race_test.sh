#!/usr/bin/env bash
# make test's second pass: the packages that run goroutines (their own, or the learner's towers,
# batchers and NATS clients they drive), tested under the race detector. The packages below are
# single-threaded numerical or file code whose tests the first pass already runs; under -race
# they only took minutes of make test (onnx/graph alone about 3, engine/policy 3) and could find nothing.
# A package that starts goroutines of its own must not be listed here.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"

declare -A sequential=(
	[engine/appo]="PPO-style loss math"
	[engine/curve]="draws a PNG"
	[engine/gif]="draws a GIF"
	[engine/impala]="loss math"
	[engine/internal/fused]="fused loss kernels"
	[engine/internal/mlp]="dense network forward and backward"
	[engine/internal/offpolicy]="config checks"
	[engine/internal/offpolicy/offpolicytest]="test helpers"
	[engine/algos]="blank imports"
	[engine/normalize]="running statistics"
	[engine/policy]="the towers' losses and gradients checked against references, one tower each (the towers' threads are learner's, race-tested there and in engine); 3 minutes under -race"
	[engine/ppo]="loss math"
	[engine/preset]="tables of settings"
	[engine/replay]="the replay ring"
	[engine/vtrace]="V-trace math"
	[envs/render]="draws frames"
	[internal/bounded]="bounded reads"
	[internal/kernels]="C kernels, one call one thread"
	[internal/names]="name rules"
	[internal/npy]="the .npy format"
	[internal/tfevent]="the TensorBoard event format"
	[internal/tfevent/tfeventtest]="its test decoder"
	[models]="exports and graph building (one mutex around gorgonia's globals); over a minute under -race"
	[models/head]="sampling math"
	[models/layout]="graph layouts"
	[onnx/edit]="ONNX graph edits"
	[onnx/graph]="graph import and autodiff, single-threaded"
	[onnx/onnxpb]="generated protobuf code"
	[scripts/docscheck]="reads the docs"
	[scripts/gendocs]="writes the docs"
	[spaces]="space descriptions"
)

module=$("$GO" list -m)
pkgs=()
while read -r p; do
	rel=${p#"$module"/}
	if [[ -n ${sequential[$rel]+x} ]]; then
		unset "sequential[$rel]"
		continue
	fi
	pkgs+=("$p")
done < <("$GO" list ./...)
if ((${#sequential[@]} > 0)); then
	echo "race_test.sh: no package ${!sequential[*]}: take it out of the list" >&2
	exit 1
fi
echo "race: ${#pkgs[@]} packages under -race (the sequential ones ran in the first pass)" >&2
# -vet=off: make test's lint has vetted these packages (no file of theirs is built only under
# the race tag).
"$GO" test -race -count=1 -vet=off -timeout 30m "${pkgs[@]}"
