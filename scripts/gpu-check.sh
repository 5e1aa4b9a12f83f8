#!/usr/bin/env bash
# Runs, on a GPU machine, only the binaries scripts/gpu-build.sh prepared (no Rust, no
# network there): the memreuse-cuda tests, then the conformance suite on --backend cuda in
# modes 0-3, then the allocator benchmark: memreuse-cuda-bench (memreuse and raw
# cuMemAlloc) writes its size trace, gpu_peer_bench.py replays the same workloads with
# PyTorch's native caching allocator and with its cudaMallocAsync backend, and a
# side-by-side table goes into summary.txt. NCCL comes from PyTorch's nvidia-nccl wheel as
# libnccl.so.2, a name cudarc does not search, so a libnccl.so symlink to it goes on
# LD_LIBRARY_PATH. Everything is written under $OUT (default ./gpu-out); the whole run
# stays under 6 minutes (the benchmark keeps ~95 s of it for itself).
# Usage: OUT=/some/dir scripts/gpu-check.sh [ARTIFACT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."

art="${1:-$PWD/gpu-artifacts}"
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
start=$SECONDS
budget=330          # seconds for everything below (6 min minus margin)
reserve=0           # seconds held back for later steps (the benchmark's share)
status=0

left() { echo $((budget - (SECONDS - start))); }
note() { echo "$*" | tee -a "$summary"; }

# Runs "$@" with at most min($cap, time left - $reserve) seconds, output to $OUT/$log.
step() {
  local log=$1 cap=$2; shift 2
  local t=$(( $(left) - reserve ))
  [ "$t" -gt "$cap" ] && t=$cap
  if [ "$t" -le 5 ]; then
    note "SKIP $log: out of time"
    status=1
    return
  fi
  local t0=$SECONDS
  timeout --kill-after=10 "$t" "$@" > "$OUT/$log" 2>&1
  local rc=$?
  note "$( [ $rc -eq 0 ] && echo PASS || echo "FAIL(rc=$rc)" ) $log ($((SECONDS - t0)) s)"
  [ $rc -eq 0 ] || status=1
}

if [ ! -f "$art/manifest.txt" ]; then
  note "no $art/manifest.txt: run scripts/gpu-build.sh on the build machine first"
  exit 2
fi
note "artifacts of commit $(cat "$art/commit.txt" 2>/dev/null || echo unknown)"

timeout 20 nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (see nvidia-smi.txt)"

nccl_dir=$(timeout 60 python3 -c '
import os, nvidia.nccl
for d in nvidia.nccl.__path__:
    lib = os.path.join(d, "lib")
    if os.path.exists(os.path.join(lib, "libnccl.so.2")):
        print(lib)
        break
' 2>"$OUT/nccl-probe.txt")
if [ -n "$nccl_dir" ]; then
  shim=$(mktemp -d)
  ln -sf "$nccl_dir/libnccl.so.2" "$shim/libnccl.so"
  export LD_LIBRARY_PATH="$shim:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "NCCL: $nccl_dir/libnccl.so.2 (symlinked as libnccl.so)"
else
  note "NCCL: nvidia-nccl wheel not found (communicator tests will report skipped)"
fi
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" > "$OUT/env.txt"
timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' \
  >> "$OUT/env.txt" 2>&1 || true

# The bench's integration test runs the binary here (briefly), not the build machine's path.
export MEMREUSE_CUDA_BENCH_BIN="$art/bin/memreuse-cuda-bench"
bench_reserve=95    # memreuse-cuda-bench 35 + two PyTorch peers 25 each + summary 10
reserve=$bench_reserve
while read -r rel; do
  case "$rel" in
    tests/*) step "test-$(basename "$rel").txt" 120 "$art/$rel" --nocapture --test-threads=1 ;;
  esac
done < "$art/manifest.txt"

# The launch test again, through the opt-in non-blocking NCCL init with a deadline.
if [ -x "$art/tests/gpu" ]; then
  step test-gpu-nonblocking-init.txt 60 env MEMREUSE_NCCL_INIT_TIMEOUT_S=60 "$art/tests/gpu" \
    a_single_process_launch --nocapture --test-threads=1
fi
step conformance.txt 240 "$art/bin/memreuse-conformance" --backend cuda --mode all \
  --json "$OUT/conformance.json" --report "$OUT/conformance"
grep -h "skipped:" "$OUT"/test-*.txt > "$OUT/skipped-tests.txt" 2>/dev/null || true
note "GPU tests that skipped themselves: $(wc -l < "$OUT/skipped-tests.txt") (see skipped-tests.txt)"
timeout 20 python3 - "$OUT/conformance.json" >> "$summary" 2>&1 <<'PY' || status=1
import collections, json, sys
runs = json.load(open(sys.argv[1]))["runs"]
count = collections.Counter(r["status"] for r in runs)
print("conformance runs by status:", dict(count))
for r in runs:
    if r["status"] == "skipped":
        print(f"  skipped {r['schedule']} mode {r['mode']}: {r['skip_reason']}")
if count.get("passed", 0) == 0:
    print("no conformance run passed on the GPU")
    sys.exit(1)
PY

# Allocator benchmark: memreuse and raw cuMemAlloc, then PyTorch's two allocators on the
# same trace, then the side-by-side table. A peer without CUDA or torch reports "skipped".
reserve=0
bench="$art/bin/memreuse-cuda-bench"
peer_py="$art/scripts/gpu_peer_bench.py"
trace="$OUT/bench-trace.txt"
if [ -x "$bench" ] && [ -f "$peer_py" ]; then
  step bench-memreuse.txt 35 "$bench" --write-trace "$trace" --json "$OUT/bench-memreuse.jsonl"
  if [ -f "$trace" ]; then
    step bench-torch-native.txt 25 env -u PYTORCH_CUDA_ALLOC_CONF python3 "$peer_py" \
      --trace "$trace" --pairs 50000 --json "$OUT/bench-torch-native.jsonl" --expect-backend native
    step bench-torch-cudaMallocAsync.txt 25 env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync \
      python3 "$peer_py" --trace "$trace" --pairs 50000 --json "$OUT/bench-torch-cudaMallocAsync.jsonl" \
      --expect-backend cudaMallocAsync
  else
    note "SKIP PyTorch peers: memreuse-cuda-bench wrote no trace (see bench-memreuse.txt)"
  fi
  step bench-summary.txt 10 python3 "$peer_py" --summarize "$OUT"/bench-*.jsonl
  { echo "== allocator benchmark (device 0; raw JSON lines in bench-*.jsonl)"
    cat "$OUT/bench-summary.txt" 2>/dev/null; } | tee -a "$summary"
else
  note "SKIP allocator benchmark: $bench or $peer_py missing (rebuild with scripts/gpu-build.sh)"
  status=1
fi

note "total $((SECONDS - start)) s, status $status"
exit $status
