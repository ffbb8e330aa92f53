#!/usr/bin/env bash
# The CUDA tower's check on the GPU machine (issue 33, part 2): learner/cudatower's GPU tests
# (its gradients against the CPU tower's, the device conformance suite, one Grad timed against
# the CPU tower) and PyTorch on the same GPU (scripts/gpu_tower.py: the same network and loss
# timed, and a float64 gradient to check both towers against). docs/GPU.md holds the figures.
#
#   scripts/gpu_tower.sh pack        here: build cudatower.test (-tags towerrl_cuda) from the
#                                    commit checked out (HEAD) into out/gpu-tower/ (xz, with
#                                    its sha256 and the commit)
#   scripts/gpu_tower.sh run         there: unpack, check the sha256, run everything, results
#                                    in $OUT (info.txt, gotest.txt, torch_bench.jsonl,
#                                    torch_check.jsonl, summary.md)
#   scripts/gpu_tower.sh --dry-run   here: pack, then run in a temporary folder without a GPU:
#                                    the test binary's host tests (its GPU tests skip without
#                                    -cuda; the host backend's gradient is dumped and checked
#                                    against PyTorch's float64 one), PyTorch timed on the CPU at
#                                    small sizes where torch is installed, the summary
#
# PYTHON names the python3 with torch and numpy (default python3; here Debian's /usr/bin/python3
# with python3-torch). On the GPU machine, with out/gpu-tower carried (it is ignored by git):
#   run: set -o pipefail; bash scripts/gpu_tower.sh run 2>&1 | tee $OUT/log.txt    carry: out/gpu-tower
# No Go there: the test binary is built here. It loads the driver (libcuda.so.1) and cuBLAS
# (libcublas.so.13, from the Python environment's NVIDIA wheels) at run time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

say() { printf 'gpu_tower: %s\n' "$*" >&2; }
die() { printf 'gpu_tower: error: %s\n' "$*" >&2; exit 1; }

MODE="${1:-}"
case "$MODE" in
pack | run | --dry-run) ;;
-h | --help | "")
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
*) die "unknown argument $MODE (see --help)" ;;
esac

PACK="${GPU_TOWER_PACK:-$ROOT/out/gpu-tower}"
PYTHON="${PYTHON:-python3}" # one with torch and numpy (Debian's /usr/bin/python3 here, after apt-get install python3-torch)

pack() {
	local src commit
	commit="$(git rev-parse HEAD)"
	mkdir -p "$PACK"
	PACK="$(cd "$PACK" && pwd)"
	src="$(mktemp -d "${TMPDIR:-/tmp}/gpu_tower_src.XXXXXX")"
	# The commit checked out, not the working tree (which other work may leave half-edited).
	git archive "$commit" | tar -x -C "$src"
	say "building learner/cudatower's test binary with -tags towerrl_cuda at $commit"
	(cd "$src" && CGO_ENABLED=1 nice -n 10 go test -c -tags towerrl_cuda -o "$PACK/cudatower.test" ./learner/cudatower/) ||
		{ rm -rf "$src"; die "building the test binary failed"; }
	rm -rf "$src"
	echo "$commit" >"$PACK/COMMIT"
	xz -T0 -6 -f -k "$PACK/cudatower.test"
	(cd "$PACK" && sha256sum cudatower.test >UNPACKED && sha256sum cudatower.test.xz >SHA256SUMS && rm cudatower.test)
	say "packed $(du -h "$PACK/cudatower.test.xz" | cut -f1) in $PACK"
}

# The CUDA 13 libraries of the Python environment's NVIDIA wheels (cuBLAS), and the driver's
# folder where the machine keeps it outside the loader's cache.
cuda_env() {
	local site libs
	site="$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)" ||
		die "no NVIDIA CUDA wheels in python3's environment (for libcublas.so.13)"
	libs="$(find "$site/nvidia" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)"
	[[ -d /usr/local/nvidia/lib64 ]] && libs="$libs:/usr/local/nvidia/lib64"
	export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# run WORK RESULTS DRY: unpacks the binary into WORK, runs the tests and PyTorch, copies the
# results into RESULTS.
run() {
	local work="$1" results="$2" dry="$3" device=cuda
	local cudaflag=(-dump "$work/dump")
	[[ -f "$PACK/cudatower.test.xz" ]] || die "no $PACK/cudatower.test.xz: run pack here and carry out/gpu-tower"
	mkdir -p "$work" "$results"
	(cd "$PACK" && sha256sum --quiet -c SHA256SUMS) || die "the packed binary's sha256 does not match"
	if command -v xz >/dev/null; then
		xz -dc "$PACK/cudatower.test.xz" >"$work/cudatower.test"
	else
		"$PYTHON" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"), 1 << 24)' \
			"$PACK/cudatower.test.xz" "$work/cudatower.test"
	fi
	chmod +x "$work/cudatower.test"
	(cd "$PACK" && sed "s|cudatower.test|$work/cudatower.test|" UNPACKED | sha256sum --quiet -c -) || die "the unpacked binary's sha256 does not match"
	if ((dry)); then
		device=cpu
	else
		cuda_env
		cudaflag+=(-cuda)
	fi
	{
		set +e
		echo "date: $(date -u +%FT%TZ)"
		echo "host: $(uname -srm); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
		if command -v nvidia-smi >/dev/null; then
			nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,pstate,temperature.gpu,power.draw --format=csv
		else
			echo "nvidia-smi: not found"
		fi
		"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
		echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
	} >"$results/info.txt"
	[[ -f "$PACK/COMMIT" ]] && echo "towerrl commit: $(cat "$PACK/COMMIT")" >>"$results/info.txt"
	cat "$results/info.txt" >&2
	say "cudatower.test -test.v ${cudaflag[*]}"
	local rc=0
	(cd "$ROOT/learner/cudatower" && "$work/cudatower.test" -test.v -test.timeout 240s "${cudaflag[@]}") >"$results/gotest.txt" 2>&1 || rc=$?
	grep -E '^(--- |ok|FAIL|PASS|CHECK|TIMING)|_test.go' "$results/gotest.txt" >&2 || true
	say "gpu_tower.py bench"
	local dryflag=()
	((dry)) && dryflag=(--dry-run)
	"$PYTHON" scripts/gpu_tower.py bench --out "$results/torch_bench.jsonl" --device "$device" "${dryflag[@]}" || rc=$?
	if [[ -d "$work/dump" ]]; then
		say "gpu_tower.py check"
		"$PYTHON" scripts/gpu_tower.py check --dump "$work/dump" --out "$results/torch_check.jsonl" || rc=$?
	fi
	"$PYTHON" scripts/gpu_tower.py summary --work "$results" || rc=$?
	((rc == 0)) || die "a step failed (exit $rc): see $results/gotest.txt and the lines above"
	say "done: results in $results"
}

case "$MODE" in
pack) pack ;;
run) run "${GPU_TOWER_WORK:-/tmp/gpu-tower}" "${OUT:-$ROOT/out/gpu-tower-results}" 0 ;;
--dry-run)
	TMP="$(mktemp -d "${TMPDIR:-/tmp}/gpu_tower.XXXXXX")"
	trap 'rm -rf "$TMP"' EXIT
	PACK="$TMP/pack"
	pack
	run "$TMP/work" "$TMP/results" 1
	;;
esac
