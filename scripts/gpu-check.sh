#!/usr/bin/env bash
# Runs, on a GPU machine, only the binaries scripts/gpu-build.sh prepared (no Rust, no
# network there): the memreuse-cuda tests, then the conformance suite on --backend cuda in
# modes 0-3. NCCL comes from PyTorch's nvidia-nccl wheel as libnccl.so.2, a name cudarc
# does not search, so a libnccl.so symlink to it goes on LD_LIBRARY_PATH. Everything is
# written under $OUT (default ./gpu-out); the whole run stays under 6 minutes.
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
status=0

left() { echo $((budget - (SECONDS - start))); }
note() { echo "$*" | tee -a "$summary"; }

# Runs "$@" with at most min($cap, time left) seconds, output to $OUT/$log.
step() {
  local log=$1 cap=$2; shift 2
  local t=$(left)
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
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' \
  >> "$OUT/env.txt" 2>&1 || true

while read -r rel; do
  case "$rel" in
    tests/*) step "test-$(basename "$rel").txt" 120 "$art/$rel" --nocapture --test-threads=1 ;;
  esac
done < "$art/manifest.txt"

step conformance.txt 240 "$art/bin/memreuse-conformance" --backend cuda --mode all \
  --json "$OUT/conformance.json" --report "$OUT/conformance"
grep -h "skipped:" "$OUT"/test-*.txt > "$OUT/skipped-tests.txt" 2>/dev/null || true
note "GPU tests that skipped themselves: $(wc -l < "$OUT/skipped-tests.txt") (see skipped-tests.txt)"
python3 - "$OUT/conformance.json" >> "$summary" 2>&1 <<'PY' || status=1
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

note "total $((SECONDS - start)) s, status $status"
exit $status
