# towerrl — the commands a person types. Logic lives in Go and in scripts/.
GO ?= go

.PHONY: all setup gpu-setup gpu-pack build test demo bench bench-batcher bench-ppo lint fixtures fuzz mpi

all: test

# The MuJoCo envs (envs/mujoco) are built in where MuJoCo's headers are installed (make setup
# installs them as root): every go command below, and the scripts they call, get -tags=mujoco
# (worked out at each command, after setup has run).
GOFLAGS_USER := $(GOFLAGS)
export GOFLAGS = $(shell GOFLAGS='$(GOFLAGS_USER)' bash scripts/goflags.sh)

## setup: fetch ONNX Runtime 1.29.0 into the per-user cache (once per machine; checksummed), and
## install MuJoCo 2.2.2 (Debian's libmujoco-dev) for the MuJoCo envs, and EGL with Mesa's
## software OpenGL (libegl1 libegl-mesa0 libgl1-mesa-dri) for drawing their episodes, where
## they are missing and this runs as root (else it prints the commands)
setup:
	@bash scripts/setup-ort.sh
	@bash scripts/setup-mujoco.sh

## gpu-setup: also fetch ONNX Runtime's CUDA execution provider plugin (CUDA 13; 179 MB,
## checksummed) beside it, for --device cuda on a machine with an NVIDIA GPU
gpu-setup: setup
	@bash scripts/setup-cuda-ep.sh

## build: every tool (cmd/*: train, batcher, eval, infer) into bin/, with the MuJoCo envs where
## MuJoCo is installed; the README and docs/ run them as bin/<tool>
build:
	$(GO) build -o bin/ ./cmd/...

## test: lint, the docs checks (links, tool flags, quoted examples: scripts/docs_check.sh), the
## whole suite, then again under the race detector every package that runs goroutines
## (scripts/race_test.sh; some learning runs and the kill test, too slow for -race, run only in the first pass), then the portability
## checks: the native code switched off (-tags purego,towerrl_runall) and the arm64 cross-build,
## then learner/mpi under mpirun (needs Open MPI: apt-get install openmpi-bin libopenmpi-dev).
## The test passes skip go test's own vet (-vet=off): lint has run every vet check over the same
## packages, test files and tags, and vetting them again costs up to a minute of CPU a pass
## (an uncached go vet ./...: 69 s)
test: setup lint
	GO=$(GO) bash scripts/docs_check.sh
	$(GO) test -count=1 -vet=off -timeout 30m ./...
	bash scripts/gpu_check.sh --dry-run
	GO=$(GO) bash scripts/race_test.sh
	GO=$(GO) bash scripts/portable.sh
	GO=$(GO) bash scripts/mpi_test.sh

## demo: the main job: train PPO on CartPole-v1, evaluate the ONNX policy over 100 episodes
demo: setup
	@bash scripts/demo.sh

## gpu-pack: build and pack what the GPU check sends to a GPU machine (docs/GPU.md)
gpu-pack: gpu-setup
	@bash scripts/gpu_check.sh pack

## bench: the performance figures quoted in the issues
bench: setup
	$(GO) test -run '^$$' -bench . -benchtime 2s ./...

## bench-batcher: the batcher's steps/s against ONNX Runtime's rows/s in separate processes
## (the CartPole MLP at batch 1024), ROUNDS alternated rounds (default 3), the medians and the
## ratios to issue 32's 85% target (scripts/batcher_bench.sh; docs/benchmarks.md)
ROUNDS ?= 3
bench-batcher: setup
	GO=$(GO) bash scripts/batcher_bench.sh $(ROUNDS)

## bench-ppo: issue 32's end-to-end PPO run (CartPole, 2 workers × 256 envs, 2 towers, 4 epochs,
## 8 minibatches), float32 and bf16 products alternated, ROUNDS rounds (default 3): env steps/s
## against the 800k target, and the evaluations (scripts/ppo_bench.sh; docs/benchmarks.md)
bench-ppo: setup
	GO=$(GO) bash scripts/ppo_bench.sh $(ROUNDS)

## fuzz: run every fuzz target (go test -fuzz) for FUZZTIME each (default 1m), e.g.
## `make fuzz FUZZTIME=10s`; an input that fails is saved under the package's testdata/fuzz/
FUZZTIME ?= 1m
fuzz: setup
	FUZZTIME=$(FUZZTIME) GO=$(GO) bash scripts/fuzz.sh

## mpi: build the tools with MPI support (build tag mpi, for DD-PPO under mpirun; needs Open MPI:
## apt-get install openmpi-bin libopenmpi-dev) into bin/, with the MuJoCo envs where MuJoCo is
## installed; scripts/mpirun.sh runs them; scripts/mpi_test.sh tests the collective
mpi:
	GOFLAGS="$$(GOFLAGS='$(GOFLAGS_USER)' bash scripts/goflags.sh mpi)" $(GO) build -o bin/ ./cmd/...

## lint: gofmt and go vet must be clean
lint:
	@bash scripts/lint.sh

## fixtures: re-export the PyTorch fixtures (needs Debian's python3-torch, python3-onnx), the float64 reference updates of DQN and SAC,
## the graph-import references, and the TensorBoard event file (python3-protobuf, protobuf-compiler);
## then fine-tune three foreign fixtures with the tools and load them back into PyTorch (testdata/pytorch, docs/pytorch.md)
fixtures:
	/usr/bin/python3 scripts/gen_fixtures.py
	/usr/bin/python3 scripts/gen_fixtures_foreign.py
	/usr/bin/python3 scripts/gen_fixture_softmax.py
	/usr/bin/python3 scripts/gen_fixture_sb3_dqn.py
	/usr/bin/python3 scripts/gen_fixture_dqn_trained.py
	/usr/bin/python3 scripts/gen_fixtures_offpolicy.py
	/usr/bin/python3 scripts/gen_fixtures_graph.py
	/usr/bin/python3 scripts/gen_fixtures_import.py
	$(GO) build -o bin/ ./cmd/train ./cmd/eval ./cmd/infer
	/usr/bin/python3 scripts/back_to_pytorch.py --bin bin
	/usr/bin/python3 scripts/gen_fixtures_mujoco.py
	/usr/bin/python3 scripts/gen_fixtures_tfevent.py
