#!/usr/bin/env bash
# The GPU check: towerrl's CUDA inference (cmd/infer --provider cuda) and GPU batcher
# (cmd/batcher --device cuda) measured against PyTorch and the CPU batcher on the GPU machine
# (docs/GPU.md holds the figures and the commands that made them).
#
#   scripts/gpu_check.sh pack              here: build what travels into out/gpu-pack/part1, part2
#   scripts/gpu_check.sh [PHASE...]        there: run the phases (default: all of them)
#   scripts/gpu_check.sh --dry-run         here: pack (fast), then every phase on the CPU provider
#                                          with small sizes, in a temporary folder (make test)
#
# Phases: unpack info torch gotest infer batcher compare (all: every one, in that order).
#   unpack   decompresses each part present under the pack folder into the work folder, checking
#            the sha256 of every packed file and of every file unpacked from it;
#   info     prints the GPU, driver, CUDA, cuDNN, PyTorch and ONNX Runtime versions found;
#   torch    scripts/gpu_bench.py torch: PyTorch's timings, random inputs, float64 references;
#   gotest   the onnx package's CUDA tests (onnx.test -cuda): every Run computes on fresh inputs;
#   infer    cmd/infer on the Nature-CNN fixture (batch 1, 256, 1024, 4096) and the CartPole MLP
#            (1024, 65536), CUDA provider, full float32 (use_tf32=0) and the provider's default,
#            page-locked host buffers and (--pageable) not, and the CPU provider for scale;
#   batcher  cmd/batcher on CartPole-v1 with the MLP policy: one GPU worker with 4096 to 65536
#            envs stepped by every core, against one CPU worker per core with the same envs;
#   compare  scripts/gpu_bench.py compare: outputs within 1e-4 of float64, ratios, the table.
#
# What travels: ONNX Runtime 1.29's CUDA provider plugin (230 MB) does not fit one call of the
# GPU machine (64 MiB with the repository), so `pack` writes two parts: part1 holds the plugin
# with only its sm_90 (H200) GPU code kept (scripts/fatbin_keep.py: the other architectures'
# code is zeroed, sizes and offsets unchanged) and xz-compressed, about 38 MB; part2 holds the
# ONNX Runtime core library, its providers_shared stub, the infer and batcher binaries and the
# onnx package's test binary, about 20 MB. Each part has a SHA256SUMS (the packed files) and an UNPACKED list (the sums of
# the files unpacked from it). Send part1 with the first call (`unpack info torch`), part2
# with the next while the machine is still up (`unpack gotest infer batcher compare`); the work
# folder out/gpu-work stays between the two calls.
#
# Environment: OUT (where results are copied; default out/gpu-results), GPU_CHECK_WORK
# (default out/gpu-work), GPU_CHECK_PACK (default out/gpu-pack), GPU_CHECK_THREADS (cores to
# use; default all), GPU_CHECK_PARTS (the parts pack writes; default "part1 part2"),
# GPU_CHECK_COMPILE_BUDGET (seconds of the torch phase after which torch.compile is skipped;
# default 100). Results: info.txt, torch.json, infer.jsonl, batcher.jsonl,
# summary.json, summary.md, gotest.txt in the work folder, copied to OUT.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

say() { printf 'gpu_check: %s\n' "$*" >&2; }
die() { printf 'gpu_check: error: %s\n' "$*" >&2; exit 1; }

DRY=0
PHASES=()
for a in "$@"; do
	case "$a" in
	--dry-run) DRY=1 ;;
	pack | unpack | info | torch | gotest | infer | compare | batcher | all) PHASES+=("$a") ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument $a (see --help)" ;;
	esac
done

ORT_VERSION=1.29.0
CACHE_DIR="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/towerrl/onnxruntime-${ORT_VERSION}"
PLUGIN_SHA=56cf3254b118ad837ccc4ed8f6d1b23504bbf7ef91b34cbc0b289cb7f10b3037

if ((DRY)); then
	TMP="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
	trap 'rm -rf "$TMP"' EXIT
	PACK="$TMP/pack" WORK="$TMP/work" RESULTS="$TMP/results"
	((${#PHASES[@]})) || PHASES=(pack all)
else
	PACK="${GPU_CHECK_PACK:-$ROOT/out/gpu-pack}"
	WORK="${GPU_CHECK_WORK:-$ROOT/out/gpu-work}"
	RESULTS="${OUT:-$ROOT/out/gpu-results}"
	((${#PHASES[@]})) || PHASES=(all)
fi
THREADS="${GPU_CHECK_THREADS:-$(nproc)}"
PARTS="${GPU_CHECK_PARTS:-part1 part2}"
# The work folder is laid out as a per-user cache (cache/towerrl/onnxruntime-1.29.0/) so that
# infer and batcher find ONNX Runtime and the CUDA plugin where `make gpu-setup` puts them.
LIB="$WORK/cache/towerrl/onnxruntime-${ORT_VERSION}"
BIN="$WORK/bin"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# compress SRC DEST_WITHOUT_SUFFIX: xz (-9e, with the x86 filter for code) when there is xz,
# else gzip; prints the file written. The dry run compresses fast.
compress() {
	local src="$1" dest="$2"
	if command -v xz >/dev/null; then
		if ((DRY)); then xz -T0 -0 -c "$src" >"$dest.xz"; else xz -T0 --x86 --lzma2=preset=9e -c "$src" >"$dest.xz"; fi
		echo "$dest.xz"
	else
		gzip -1 -c "$src" >"$dest.gz"
		echo "$dest.gz"
	fi
}

decompress() { # decompress FILE DEST
	case "$1" in
	*.xz)
		if command -v xz >/dev/null; then xz -dc "$1" >"$2"; else
			python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"), 1 << 24)' "$1" "$2"
		fi
		;;
	*.gz) gzip -dc "$1" >"$2" ;;
	*) die "do not know how to unpack $1" ;;
	esac
}

# add PART SRC UNPACKED_PATH: compresses SRC into the part and records both sums.
add() {
	local part="$1" src="$2" dest="$3" packed
	packed="$(compress "$src" "$PACK/$part/$(basename "$dest")")"
	printf '%s  %s\n' "$(sha "$packed")" "$(basename "$packed")" >>"$PACK/$part/SHA256SUMS"
	printf '%s  %s\n' "$(sha "$src")" "$dest" >>"$PACK/$part/UNPACKED"
	say "packed $dest: $(du -h "$packed" | cut -f1) ($(basename "$packed"))"
}

phase_pack() {
	[[ -f "$CACHE_DIR/libonnxruntime.so.1" ]] || die "no ONNX Runtime in $CACHE_DIR: run make setup"
	local part
	for part in $PARTS; do rm -rf "${PACK:?}/$part"; done
	rm -rf "$WORK/build" "$WORK/src"
	mkdir -p "$WORK/build"
	# The binaries are built from the commit checked out (git archive), so that the figures
	# name the code that made them; the dry run builds the working tree as it is.
	local src="$ROOT" commit="working tree"
	if ((!DRY)); then
		commit="$(git rev-parse HEAD)"
		mkdir -p "$WORK/src"
		git archive HEAD | tar -x -C "$WORK/src"
		src="$WORK/src"
	fi
	say "building infer and batcher (CGO_ENABLED=1) from $commit"
	if [[ " $PARTS " == *" part2 "* ]]; then
		mkdir -p "$PACK/part2"
		(cd "$src" && CGO_ENABLED=1 "${GO:-go}" build -trimpath -ldflags='-s -w' -o "$WORK/build/" ./cmd/infer ./cmd/batcher)
		(cd "$src" && CGO_ENABLED=1 "${GO:-go}" test -c -trimpath -ldflags='-s -w' -o "$WORK/build/onnx.test" ./onnx)
		printf 'built from: %s\n%s\n' "$commit" "$("${GO:-go}" version)" >"$PACK/part2/BUILD"
		add part2 "$CACHE_DIR/libonnxruntime.so.1" "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime.so.1"
		add part2 "$WORK/build/infer" bin/infer
		add part2 "$WORK/build/batcher" bin/batcher
		add part2 "$WORK/build/onnx.test" bin/onnx.test
		if ((!DRY)); then
			add part2 "$CACHE_DIR/libonnxruntime_providers_shared.so" "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime_providers_shared.so"
		fi
	fi
	rm -rf "$WORK/src"
	if ((DRY)); then
		say "dry run: the CUDA plugin (part1) is not packed"
		return
	fi
	local plugin="$CACHE_DIR/libonnxruntime_providers_cuda.so"
	[[ -f "$plugin" ]] || die "no CUDA plugin in $CACHE_DIR: run make gpu-setup"
	[[ "$(sha "$plugin")" == "$PLUGIN_SHA" ]] || die "$plugin is not the plugin make gpu-setup checks (sha256)"
	[[ " $PARTS " == *" part1 "* ]] || return 0
	mkdir -p "$PACK/part1"
	python3 scripts/fatbin_keep.py --arch 90 "$plugin" "$WORK/build/libonnxruntime_providers_cuda.so" >"$PACK/part1/fatbin_keep.json"
	say "kept sm_90 only: $(cat "$PACK/part1/fatbin_keep.json")"
	add part1 "$WORK/build/libonnxruntime_providers_cuda.so" "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime_providers_cuda.so"
	du -sh "$PACK"/part* >&2
	say "send part1 with the first call (carry out/gpu-pack/part1), part2 with the second (carry out/gpu-pack/part2)"
}

phase_unpack() {
	mkdir -p "$WORK"
	local part n=0
	for part in "$PACK"/part*/; do
		[[ -f "$part/SHA256SUMS" ]] || continue
		n=$((n + 1))
		local done_list="$WORK/UNPACKED.$(basename "$part")"
		if cmp -s "$part/UNPACKED" "$done_list" && (cd "$WORK" && sha256sum --quiet -c "$done_list" 2>/dev/null); then
			say "$(basename "$part") was unpacked by an earlier call; its files' sha256 checked again"
			continue
		fi
		(cd "$part" && sha256sum --quiet -c SHA256SUMS) || die "$part: a packed file's sha256 does not match"
		while read -r _ dest; do
			mkdir -p "$WORK/$(dirname "$dest")"
			local src
			src="$(ls "$part/$(basename "$dest")".*z)"
			decompress "$src" "$WORK/$dest"
			if [[ "$dest" == bin/* ]]; then chmod +x "$WORK/$dest"; fi
		done <"$part/UNPACKED"
		cp "$part/UNPACKED" "$WORK/UNPACKED.$(basename "$part")"
		(cd "$WORK" && sha256sum --quiet -c "UNPACKED.$(basename "$part")") || die "$part: an unpacked file's sha256 does not match"
		say "unpacked $(basename "$part"): $(wc -l <"$part/UNPACKED") files, sha256 checked"
	done
	((n)) || say "no part under $PACK to unpack"
}

# need FILE...: every file must be unpacked, and the sums of everything unpacked must hold.
need() {
	local f
	for f in "$@"; do
		[[ -f "$WORK/$f" ]] || die "$WORK/$f is missing: send the part that holds it and run unpack (a fresh machine keeps nothing from an earlier call)"
	done
	(cd "$WORK" && cat UNPACKED.* | sha256sum --quiet -c -) || die "an unpacked file changed"
}

# The CUDA 13 libraries of the Python environment's NVIDIA wheels (cuBLAS, cudart, cuRAND, cuDNN).
nvidia_libs() {
	local site
	site="$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)" || return 0
	find "$site/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:
}

cuda_env() {
	export XDG_CACHE_HOME="$WORK/cache"
	if ((!DRY)); then
		local libs
		libs="$(nvidia_libs)"
		[[ -n "$libs" ]] || die "no NVIDIA CUDA wheels found in python3's environment (for libcudart.so.13, libcublas.so.13, libcudnn.so.9)"
		export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	fi
}

phase_info() {
	mkdir -p "$WORK"
	{
		set +e # a missing tool is a line that says so, not the end of the check
		echo "date: $(date -u +%FT%TZ)"
		echo "host: $(uname -srm); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
		echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
		if command -v nvidia-smi >/dev/null; then
			nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,pstate,temperature.gpu,power.draw --format=csv
			nvidia-smi | grep -m1 'CUDA Version' | sed 's/ *|//g; s/^ *//'
		else
			echo "nvidia-smi: not found (no NVIDIA driver here)"
		fi
		command -v nvcc >/dev/null && nvcc --version | tail -n 2 | head -n 1
		python3 - <<-'EOF' 2>&1 || true
			import importlib
			for m in ("torch", "onnxruntime", "numpy", "triton"):
			    try:
			        v = importlib.import_module(m).__version__
			    except Exception as e:  # noqa: BLE001
			        v = "not importable (%s)" % type(e).__name__
			    print("python %s: %s" % (m, v))
			try:
			    import torch
			    print("torch CUDA %s, cuDNN %s, GPU %s" % (torch.version.cuda, torch.backends.cudnn.version(),
			          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"))
			except Exception as e:  # noqa: BLE001
			    print("torch: %s" % e)
		EOF
		echo "CUDA libraries from the NVIDIA wheels:"
		local d
		for d in $(nvidia_libs | tr : ' '); do
			(cd "$d" && ls lib*.so.* 2>/dev/null | grep -E 'cudart|cublas|cudnn\.|curand' | sed "s|^|  $d/|")
		done
		cat "$PACK"/part*/BUILD 2>/dev/null
		echo "unpacked (sha256 checked):"
		cat "$WORK"/UNPACKED.* 2>/dev/null | sed 's/^/  /'
	} | tee "$WORK/info.txt"
}

phase_torch() {
	if ! python3 -c 'import torch, numpy' 2>/dev/null; then
		if ((DRY)); then
			say "dry run: no torch and numpy in python3; the torch and compare phases are skipped"
			return
		fi
		die "python3 cannot import torch and numpy"
	fi
	local args=(--device cuda)
	if ((DRY)); then args=(--device cpu --dry-run); fi
	python3 scripts/gpu_bench.py torch --work "$WORK" --compile-budget "${GPU_CHECK_COMPILE_BUDGET:-100}" "${args[@]}"
}

# The onnx package's CUDA tests, from its folder (they read ../testdata); the dry run runs the
# same binary without -cuda, where they skip.
phase_gotest() {
	need bin/onnx.test "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime.so.1"
	local args=(-test.run 'CUDA|Rebind|Reselected|PinHost' -test.v)
	if ((!DRY)); then
		need "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime_providers_cuda.so"
		args+=(-cuda)
	fi
	cuda_env
	local rc=0
	(cd onnx && timeout 300 "$WORK/bin/onnx.test" "${args[@]}") >"$WORK/gotest.txt" 2>&1 || rc=$?
	grep -E '^(---|ok|FAIL|PASS)|cuda_test.go' "$WORK/gotest.txt" >&2 || true
	((rc == 0)) || die "the onnx package's CUDA tests failed (exit $rc); $WORK/gotest.txt has their output"
}

# infer_one TAG MODEL BATCH MODE REPEAT [infer flags...]: one cmd/infer run, appended to infer.jsonl.
infer_one() {
	local tag="$1" model="$2" batch="$3" mode="$4" repeat="$5" provider=cuda allow_nan=true
	shift 5
	local fixture input args=()
	case "$model" in cnn) fixture=nature_cnn ;; mlp) fixture=mlp_tanh ;; esac
	input="$WORK/data/${model}_x.npy"
	[[ -f "$input" ]] || input="testdata/$fixture.input.npy" # dry run without torch: the fixture's rows
	if ((DRY)); then provider=cpu; fi
	for a in "$@"; do
		case "$a" in
		--provider=*) provider="${a#--provider=}" ;;
		--nan-check) allow_nan=false ;;
		*) args+=("$a") ;;
		esac
	done
	if [[ "$mode" == fp32 && "$provider" == cuda ]]; then args+=(--cuda-option use_tf32=0); fi
	if [[ "$allow_nan" == true ]]; then args+=(--allow-nan); fi
	rm -rf "$WORK/infer/$tag"
	local out rc=0
	out="$(timeout 300 "$BIN/infer" --model "testdata/$fixture.onnx" --input "$input" --out "$WORK/infer/$tag" \
		--batch "$batch" --repeat "$repeat" --provider "$provider" "${args[@]}" 2>"$WORK/logs/infer-$tag.err")" || rc=$?
	local head
	head="$(printf '{"tag":"%s","model":"%s","batch":%d,"mode":"%s","provider":"%s","allow_nan":%s,"args":"%s"' \
		"$tag" "$model" "$batch" "$mode" "$provider" "$allow_nan" "${args[*]}")"
	if ((rc == 0)); then
		printf '%s,"result":%s}\n' "$head" "$out" >>"$WORK/infer.jsonl"
		say "infer $tag: $(printf '%s' "$out" | grep -o '"ms_per_run_median":[0-9.e+-]*'), $(printf '%s' "$out" | grep -o '"samples_per_sec":[0-9.e+-]*')"
	else
		local why
		why="$(tail -n 3 "$WORK/logs/infer-$tag.err" | tr '\n"\\' '   ' | cut -c1-400)"
		printf '%s,"error":"exit %d: %s"}\n' "$head" "$rc" "$why" >>"$WORK/infer.jsonl"
		say "infer $tag FAILED (exit $rc): $why"
	fi
}

phase_infer() {
	need bin/infer "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime.so.1"
	((DRY)) || need "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime_providers_cuda.so"
	cuda_env
	mkdir -p "$WORK/logs"
	rm -f "$WORK/infer.jsonl"
	if ((DRY)); then
		local b
		for b in 1 8; do infer_one "cnn-$b-fp32" cnn "$b" fp32 2; done
		for b in 64 256; do infer_one "mlp-$b-fp32" mlp "$b" fp32 2; done
		infer_one cnn-8-default cnn 8 default 2
		infer_one cnn-8-fp32-pageable cnn 8 fp32 2 --pageable
		return
	fi
	# Repeats sized for about a second each at the expected rates.
	infer_one cnn-1-fp32 cnn 1 fp32 2000
	infer_one cnn-256-fp32 cnn 256 fp32 200
	infer_one cnn-1024-fp32 cnn 1024 fp32 60
	infer_one cnn-2048-fp32 cnn 2048 fp32 40
	infer_one cnn-4096-fp32 cnn 4096 fp32 20
	infer_one mlp-1024-fp32 mlp 1024 fp32 2000
	infer_one mlp-65536-fp32 mlp 65536 fp32 300
	infer_one cnn-1024-default cnn 1024 default 60
	infer_one cnn-4096-default cnn 4096 default 20
	infer_one mlp-65536-default mlp 65536 default 300
	# ONNX Runtime's own convolution algorithm search, which towerrl replaces by HEURISTIC.
	infer_one cnn-2048-fp32-exhaustive cnn 2048 fp32 40 --cuda-option cudnn_conv_algo_search=EXHAUSTIVE
	infer_one cnn-4096-fp32-exhaustive cnn 4096 fp32 20 --cuda-option cudnn_conv_algo_search=EXHAUSTIVE
	# Pageable host buffers (--pageable): what page-locking them saves on the copies.
	infer_one cnn-256-fp32-pageable cnn 256 fp32 200 --pageable
	infer_one cnn-1024-fp32-pageable cnn 1024 fp32 60 --pageable
	infer_one cnn-4096-fp32-pageable cnn 4096 fp32 20 --pageable
	# What Run's NaN check on the inputs costs at the largest batch (the rows above skip it).
	infer_one cnn-4096-fp32-nancheck cnn 4096 fp32 20 --nan-check
	# ONNX Runtime's CPU provider on every core of the same machine, for scale.
	infer_one cnn-256-cpu cnn 256 fp32 10 --provider=cpu --threads "$THREADS"
	infer_one mlp-65536-cpu mlp 65536 fp32 100 --provider=cpu --threads "$THREADS"
}

phase_compare() {
	if ! python3 -c 'import torch, numpy' 2>/dev/null || [[ ! -f "$WORK/torch.json" ]]; then
		if ((DRY)); then
			say "dry run: no torch results; infer.jsonl and batcher.jsonl are the results"
			return
		fi
		die "compare needs python3 with torch and numpy, and the torch phase's $WORK/torch.json"
	fi
	python3 scripts/gpu_bench.py compare --work "$WORK"
}

# batcher_one DEVICE WORKERS ENVS_PER_WORKER ENV_THREADS STEPS
batcher_one() {
	local device="$1" workers="$2" envs="$3" threads="$4" steps="$5" out rc=0
	local tag="$device-${workers}x$envs-t$threads"
	out="$(timeout 300 "$BIN/batcher" --policy testdata/mlp_tanh.onnx --env CartPole-v1 --device "$device" \
		--workers "$workers" --envs "$envs" --env-threads "$threads" --threads 1 --steps "$steps" --rollout 32 --seed 1 \
		2>"$WORK/logs/batcher-$tag.err")" || rc=$?
	local head
	head="$(printf '{"tag":"%s","device":"%s","shape":"%dx%d","env_threads":%d' "$tag" "$device" "$workers" "$envs" "$threads")"
	if ((rc == 0)); then
		printf '%s,"result":%s}\n' "$head" "$out" >>"$WORK/batcher.jsonl"
		say "batcher $tag: $(printf '%s' "$out" | grep -o '"steps_per_sec":[0-9.e+-]*')"
	else
		local why
		why="$(tail -n 3 "$WORK/logs/batcher-$tag.err" | tr '\n"\\' '   ' | cut -c1-400)"
		printf '%s,"error":"exit %d: %s"}\n' "$head" "$rc" "$why" >>"$WORK/batcher.jsonl"
		say "batcher $tag FAILED (exit $rc): $why"
	fi
}

phase_batcher() {
	need bin/batcher "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime.so.1"
	((DRY)) || need "cache/towerrl/onnxruntime-${ORT_VERSION}/libonnxruntime_providers_cuda.so"
	cuda_env
	mkdir -p "$WORK/logs"
	rm -f "$WORK/batcher.jsonl"
	local gpu=cuda t="$THREADS" m steps=16777216
	if ((DRY)); then
		gpu=cpu steps=8192
		batcher_one "$gpu" 1 128 "$t" "$steps"
		batcher_one cpu "$t" $((128 / t)) 1 "$steps"
		return
	fi
	for m in 4096 16384 65536; do
		batcher_one "$gpu" 1 "$m" "$t" "$steps"
		batcher_one cpu "$t" $((m / t)) 1 "$steps"
	done
	# Four GPU workers share the GPU, each stepping its envs on a quarter of the cores, so that
	# one worker's inference overlaps the others' env steps.
	batcher_one "$gpu" 4 16384 $((t / 4)) "$steps"
}

results() {
	mkdir -p "$RESULTS"
	local f
	for f in info.txt torch.json gotest.txt infer.jsonl batcher.jsonl summary.json summary.md; do
		[[ -f "$WORK/$f" ]] && cp "$WORK/$f" "$RESULTS/"
	done
	return 0
}

run_phase() {
	local start=$SECONDS
	say "== $1"
	"phase_$1"
	say "== $1 done in $((SECONDS - start)) s"
}

for p in "${PHASES[@]}"; do
	if [[ "$p" == all ]]; then
		for q in unpack info torch gotest infer batcher compare; do run_phase "$q"; done
	else
		run_phase "$p"
	fi
	results
done

if ((DRY)); then
	# The dry run checks the script itself: every part unpacked and checked, every run recorded.
	for f in info.txt gotest.txt infer.jsonl batcher.jsonl; do [[ -s "$RESULTS/$f" ]] || die "dry run: $f was not written"; done
	grep -q '"error"' "$RESULTS/infer.jsonl" "$RESULTS/batcher.jsonl" && die "dry run: a run failed (see above)"
	[[ "$(wc -l <"$RESULTS/infer.jsonl")" == 6 && "$(wc -l <"$RESULTS/batcher.jsonl")" == 2 ]] || die "dry run: runs missing"
	say "dry run passed: $(wc -l <"$RESULTS/infer.jsonl") infer runs and $(wc -l <"$RESULTS/batcher.jsonl") batcher runs recorded"
fi
