#!/usr/bin/env bash
# The main job: train PPO on CartPole-v1, evaluate the exported ONNX policy over 100 episodes
# with cmd/eval, and say where the policy and the learning curve are.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${DEMO_OUT:-out/demo}"
seed="${DEMO_SEED:-0}"
steps="${DEMO_STEPS:-500000}"
towers="${DEMO_TOWERS:-2}" # the learner splits each minibatch over both cores (same bits as 1 tower)
mkdir -p bin "$(dirname "$out")"
if [[ -e "$out" ]]; then
	# Keep the previous demo run (one generation) instead of refusing or deleting it.
	rm -rf "$out.previous"
	mv "$out" "$out.previous"
	echo "demo: moved the previous run to $out.previous" >&2
fi
go build -o bin/train ./cmd/train
go build -o bin/eval ./cmd/eval
echo "demo: training PPO on CartPole-v1 for ${steps} env steps (seed ${seed}, ${towers} towers) into ${out}" >&2
bin/train --env CartPole-v1 --total-steps "$steps" --seed "$seed" --towers "$towers" --out "$out" --log-level warn > "$out.train.json"
echo "demo: training summary: $(cat "$out.train.json")" >&2
echo "demo: evaluating ${out}/policy.onnx over 100 episodes" >&2
bin/eval --policy "$out/policy.onnx" --env CartPole-v1 --episodes 100 --seed 12345 --log-level warn > "$out.eval.json"
eval_mean=$(sed -n 's/.*"return_mean":\([^,]*\).*/\1/p' "$out.eval.json")
train_s=$(sed -n 's/.*"train_seconds":\([^,]*\).*/\1/p' "$out.train.json")
cat <<MSG
policy:         $out/policy.onnx
learning curve: $out/curve.png
metrics:        $out/metrics.jsonl
training time:  ${train_s} s
evaluation:     mean return ${eval_mean} over 100 episodes (CartPole-v1 is solved at 475)
MSG
