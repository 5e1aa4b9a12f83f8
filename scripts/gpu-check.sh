#!/usr/bin/env bash
# Runs, on a GPU machine, only the binaries scripts/gpu-build.sh prepared (no Rust, no
# network there): the memreuse-cuda tests, then the conformance suite on --backend cuda in
# modes 0-3, then the allocator benchmark: memreuse-cuda-bench (memreuse and raw
# cuMemAlloc) writes its size trace, gpu_peer_bench.py replays the same workloads with
# PyTorch's native caching allocator and with its cudaMallocAsync backend, and a
# side-by-side table goes into summary.txt. NCCL comes from PyTorch's nvidia-nccl wheel as
# libnccl.so.2, a name cudarc does not search, so a libnccl.so symlink to it goes on
# LD_LIBRARY_PATH. $OUT (default ./gpu-out) ends up with exactly two files: summary.txt and
# gpu-check.tar.gz (every log, report and JSON line file); the summary, at most 10 KB, is
# also printed. The whole run stays under 6 minutes (the benchmark keeps ~95 s for itself).
# Test binaries run with MEMREUSE_REQUIRE_DEVICE=1 (a missing GPU fails them instead of
# skipping) and the suite with --require-backend cuda.
# Usage: OUT=/some/dir scripts/gpu-check.sh [ARTIFACT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."

art="${1:-$PWD/gpu-artifacts}"
final="${OUT:-$PWD/gpu-out}"
mkdir -p "$final"
final=$(cd "$final" && pwd)
# Everything is written into a work directory, archived at the end.
OUT="$final/gpu-check"
rm -rf "$OUT"
mkdir -p "$OUT"
summary="$final/summary.txt"
: > "$summary"
start=$SECONDS
export MEMREUSE_REQUIRE_DEVICE=1
export NCCL_DEBUG=WARN

finish() {
  tar czf "$final/gpu-check.tar.gz" -C "$final" gpu-check 2>/dev/null \
    && rm -rf "$OUT" || note "could not write gpu-check.tar.gz (logs left in $OUT)"
  # At most 10 KB of summary on the terminal.
  head -c 10000 "$summary"
}
trap finish EXIT
budget=330          # seconds for everything below (6 min minus margin)
reserve=0           # seconds held back for later steps (the benchmark's share)
status=0

left() { echo $((budget - (SECONDS - start))); }
# The summary is printed once, at the end (at most 10 KB); until then it only grows.
note() { echo "$*" >> "$summary"; }

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
# Copies (scp, unzip, an upload) often drop executable bits: restore them first.
chmod +x "$art"/bin/* "$art"/tests/* 2>/dev/null || true

# What the loader sees. A CUDA toolkit's stub libcuda.so (lib64/stubs) found before the
# driver's libcuda.so.1 makes every driver call fail: drop stub directories from
# LD_LIBRARY_PATH and put the driver's library first under the name cudarc asks for.
ldconfig -p > "$OUT/ldconfig.txt" 2>&1 || true
grep -E 'libcuda\.so|libnccl' "$OUT/ldconfig.txt" > "$OUT/ldconfig-cuda.txt" 2>/dev/null || true
clean_path=""
IFS=':' read -r -a ld_dirs <<< "${LD_LIBRARY_PATH:-}"
for d in "${ld_dirs[@]}"; do
  [ -z "$d" ] && continue
  if [ -e "$d/libcuda.so" ] && { [[ "$d" == *stubs* ]] || ! [ -e "$d/libcuda.so.1" ]; }; then
    note "CUDA stub: $d/libcuda.so is ahead of the driver: removed $d from LD_LIBRARY_PATH"
    continue
  fi
  clean_path="${clean_path:+$clean_path:}$d"
done
export LD_LIBRARY_PATH="$clean_path"
driver=$(awk '/libcuda\.so\.1 / {print $NF; exit}' "$OUT/ldconfig.txt")
if [ -n "$driver" ] && [[ "$driver" != *stubs* ]]; then
  cuda_shim=$(mktemp -d)
  ln -sf "$driver" "$cuda_shim/libcuda.so"
  ln -sf "$driver" "$cuda_shim/libcuda.so.1"
  export LD_LIBRARY_PATH="$cuda_shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "CUDA driver: $driver (ldconfig; linked first as libcuda.so)"
else
  note "CUDA driver: no libcuda.so.1 in ldconfig -p (see ldconfig-cuda.txt)"
fi

timeout 20 nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (see nvidia-smi.txt)"

# NCCL from the wheels PyTorch installs: nvidia-nccl (nvidia/nccl/lib), the CUDA 13 and
# 12 meta wheels (nvidia/cu13/lib, nvidia/cu12/lib), or torch's own lib directory.
nccl_dir=$(timeout 60 python3 -c '
import importlib.util, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
spec = importlib.util.find_spec("torch")
cands = []
for r in roots:
    for sub in ("nccl", "cu13", "cu12"):
        cands.append(os.path.join(r, "nvidia", sub, "lib"))
if spec and spec.origin:
    cands.append(os.path.join(os.path.dirname(spec.origin), "lib"))
for lib in cands:
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
  # Already on the loader's path (a system NCCL, or CI's stand-in): say so, not "missing".
  found=""
  IFS=':' read -r -a ld_dirs <<< "${LD_LIBRARY_PATH:-}"
  for d in "${ld_dirs[@]}"; do
    [ -n "$d" ] && [ -e "$d/libnccl.so" ] && { found="$d/libnccl.so"; break; }
  done
  if [ -n "$found" ]; then
    note "NCCL: $found (on LD_LIBRARY_PATH; no PyTorch wheel)"
  else
    note "NCCL: libnccl.so.2 not found in nvidia/{nccl,cu13,cu12}/lib or torch/lib (communicator tests fail: MEMREUSE_REQUIRE_DEVICE=1)"
  fi
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

# The virtual-memory bindings (cuMemAddressReserve .. cuMemAddressFree) have never run on a
# GPU before: their test's verdict and the granularity get a summary line of their own.
# With --nocapture the test's own output sits between `test NAME ...` and its verdict, so
# the verdict is read from libtest's closing list of failures instead.
if [ -f "$OUT/test-gpu.txt" ]; then
  vm_verdict="did not run"
  if grep -qE '^test virtual_memory_on_the_device ' "$OUT/test-gpu.txt"; then
    vm_verdict=ok
    grep -qE '^    virtual_memory_on_the_device$' "$OUT/test-gpu.txt" && vm_verdict=FAILED
  fi
  vm_gran=$(grep -o 'granularity [0-9]* bytes' "$OUT/test-gpu.txt" | head -1)
  note "virtual memory: test virtual_memory_on_the_device ${vm_verdict}${vm_gran:+, $vm_gran}"
fi

# The launch test again, through the opt-in non-blocking NCCL init with a deadline.
if [ -x "$art/tests/gpu" ]; then
  step test-gpu-nonblocking-init.txt 60 env MEMREUSE_NCCL_INIT_TIMEOUT_S=60 "$art/tests/gpu" \
    a_single_process_launch --nocapture --test-threads=1
fi
step conformance.txt 240 "$art/bin/memreuse-conformance" --require-backend cuda --mode all \
  --json "$OUT/conformance.json" --report "$OUT/conformance"
grep -h "skipped:" "$OUT"/test-*.txt > "$OUT/skipped-tests.txt" 2>/dev/null || true
# Failing test names (not their whole output) go into the summary.
grep -h -E "^test .* FAILED$|panicked at" "$OUT"/test-*.txt 2>/dev/null | head -20 >> "$summary" || true
note "GPU tests that skipped themselves: $(wc -l < "$OUT/skipped-tests.txt") (see skipped-tests.txt)"
timeout 20 python3 - "$OUT/conformance.json" >> "$summary" 2>&1 <<'PY' || status=1
import collections, json, sys
runs = json.load(open(sys.argv[1]))["runs"]
count = collections.Counter(r["status"] for r in runs)
print("conformance runs by status:", dict(count))
checkers = collections.Counter(r.get("race_checker") for r in runs if r["status"] != "skipped")
print("race checkers:", dict(checkers))
# Skips are counted by reason, not listed one by one (the list is in the archive).
reasons = collections.Counter((r["skip_reason"] or "")[:120] for r in runs if r["status"] == "skipped")
for reason, n in reasons.most_common(5):
    print(f"  {n} skipped: {reason}")
bad = [r for r in runs if r["status"] in ("failed", "error")]
for r in bad[:10]:
    print(f"  {r['status']} {r['schedule']} mode {r['mode']}: {(r.get('error') or '')[:200]} races {r.get('races')}")
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
  # MEMREUSE_BENCH_MAX_LIVE_MIB scales the trace to a smaller device (the bench's
  # --max-live-mib; CI's stand-in has 1 GiB devices); unset, the bench's default.
  # MEMREUSE_BENCH_ARGS: further bench options, split on spaces (CI shortens the raw
  # driver's share, whose cuMemAlloc takes milliseconds on the stand-in); unset, none.
  read -r -a bench_args <<< "${MEMREUSE_BENCH_ARGS:-}"
  step bench-memreuse.txt 35 "$bench" --write-trace "$trace" --json "$OUT/bench-memreuse.jsonl" \
    ${MEMREUSE_BENCH_MAX_LIVE_MIB:+--max-live-mib "$MEMREUSE_BENCH_MAX_LIVE_MIB"} ${bench_args[@]+"${bench_args[@]}"}
  if [ -f "$trace" ]; then
    step bench-torch-native.txt 25 env -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF python3 "$peer_py" \
      --trace "$trace" --pairs 50000 --json "$OUT/bench-torch-native.jsonl" --expect-backend native
    # PYTORCH_ALLOC_CONF is the current name, PYTORCH_CUDA_ALLOC_CONF the deprecated one
    # older releases read: set both.
    step bench-torch-cudaMallocAsync.txt 25 env PYTORCH_ALLOC_CONF=backend:cudaMallocAsync \
      PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 "$peer_py" --trace "$trace" --pairs 50000 --json "$OUT/bench-torch-cudaMallocAsync.jsonl" \
      --expect-backend cudaMallocAsync
  else
    note "SKIP PyTorch peers: memreuse-cuda-bench wrote no trace (see bench-memreuse.txt)"
  fi
  # Peers that skipped (no torch, or torch without CUDA) are counted by reason.
  timeout 10 python3 - "$OUT"/bench-torch-*.jsonl >> "$summary" 2>&1 <<'PY' || true
import collections, json, sys
peers, reasons = 0, collections.Counter()
for path in sys.argv[1:]:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        continue
    peers += 1
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "skipped" in record:
            reasons[str(record["skipped"])[:120]] += 1
            break
skipped = sum(reasons.values())
print(f"PyTorch peers: {peers - skipped} ran, {skipped} skipped")
for reason, n in reasons.most_common(3):
    print(f"  {n} skipped: {reason}")
PY
  step bench-summary.txt 10 python3 "$peer_py" --summarize "$OUT"/bench-*.jsonl
  { echo "== allocator benchmark (device 0; raw JSON lines in bench-*.jsonl)"
    cat "$OUT/bench-summary.txt" 2>/dev/null; } >> "$summary"
else
  note "SKIP allocator benchmark: $bench or $peer_py missing (rebuild with scripts/gpu-build.sh)"
  status=1
fi

note "total $((SECONDS - start)) s, status $status"
exit $status
