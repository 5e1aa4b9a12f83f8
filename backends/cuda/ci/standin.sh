#!/usr/bin/env bash
# The CUDA backend's whole FFI path in CI, against the stand-in (backends/cuda/standin:
# one library with the CUDA 12.8 driver API and NCCL faces over the mock device), found like
# a real install: a directory holding libcuda.so, libcuda.so.1, libnccl.so and libnccl.so.2,
# all links to the one stand-in library, first on LD_LIBRARY_PATH. Nothing is installed
# anywhere else. Stages (each prints its duration):
#   gpu-scripts  scripts/gpu-build.sh then scripts/gpu-check.sh, as a GPU runner runs them,
#                against the stand-in (bounded by `timeout`): exit 0, $OUT holds exactly
#                summary.txt (at most 10 KB, and all the script printed) and
#                gpu-check.tar.gz (every log), no step failed or ran out of time, PyTorch
#                peers skipped with a counted reason where torch has no CUDA, the benchmark's
#                trace scaled to the stand-in's 1 GiB devices (MEMREUSE_BENCH_MAX_LIVE_MIB).
#                Its conformance run is the suite: built-in suite, modes 0-3, --require-backend
#                cuda: every run passed with the reference digest, the stand-in's race
#                detector, zero races, zero leaked bytes (judged from the archive)
#   negative     the negative control judged by the runner (exit 0 = every verdict matches),
#                natively and with --race-check adaptor, both on cuda
#   expandable   the suite under --alloc-conf expandable_segments:True (2 MiB pages): the
#                cuMem* path, same checks
#   tests        memreuse-cuda's tests/gpu.rs (device and communicator contract kits) and
#                tests/standin.rs, and the conformance CUDA tests, with
#                MEMREUSE_REQUIRE_DEVICE=1 (a skip fails)
#   profiles     the install profiles no-vm (no cuMem* symbols, attribute 0) and old-nccl
#                (no ncclCommSplit/InitRankConfig/AlltoAll): suite on each; on no-vm the
#                expandable runs skipped and the backend's skip reason naming the missing
#                cuMem* symbol
# Needs the release runner built with every backend feature and the release stand-in (the
# conformance-build stage of .ci/run builds both):
#   cargo build --release --locked -p memreuse-conformance --features ascend,cuda \
#     -p memreuse-ascend-standin -p memreuse-cuda-standin
# and reuses the test stage's `cargo test --workspace --locked` build (dev profile) for the
# test binaries of `tests` and `gpu-scripts` (built here if missing, which takes longer).
set -euo pipefail
cd "$(dirname "$0")/../../.."
started=$SECONDS
target="${CARGO_TARGET_DIR:-$PWD/target}"
bin="$target/release/memreuse-conformance"
so="$target/release/libmemreuse_cuda_standin.so"
for f in "$bin" "$so"; do
  if [ ! -e "$f" ]; then
    echo "cuda-standin: $f is missing; build it with:" >&2
    echo "  cargo build --release --locked -p memreuse-conformance --features ascend,cuda -p memreuse-ascend-standin -p memreuse-cuda-standin" >&2
    exit 1
  fi
done
work="$(mktemp -d)"
trap '[ -n "${KEEP_CUDA_STANDIN:-}" ] || rm -rf "$work"' EXIT

# install DIR LIB: DIR holds the four names a CUDA + NCCL install has, all links to LIB.
install() {
  local n
  mkdir -p "$1"
  for n in libcuda.so libcuda.so.1 libnccl.so libnccl.so.2; do
    ln -sf "$2" "$1/$n"
  done
}
install "$work/lib" "$so"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

part() {
  local name=$1; shift
  local t0=$SECONDS
  echo "--- cuda-standin: $name"
  "$@"
  echo "--- cuda-standin: $name took $((SECONDS - t0)) s"
}

# check REPORT WHAT: every cuda run passed with the reference digest, the native race
# detector, zero races and zero leaked bytes.
check() {
  python3 - "$1" "$2" <<'PY'
import json, sys
path, what = sys.argv[1], sys.argv[2]
runs = [r for r in json.load(open(path))["runs"] if r["backend"] == "cuda"]
bad = [] if runs else ["no cuda runs"]
for r in runs:
    key = f"{r['schedule']} mode {r['mode']}"
    if r["status"] != "passed":
        bad.append(f"{key}: {r['status']} {(r.get('error') or r.get('skip_reason') or '')[:300]}")
    if r["digest"] != r.get("reference_digest"):
        bad.append(f"{key}: digest {r['digest']} != reference {r.get('reference_digest')}")
    if r["races"] is None or r.get("race_checker") != "native":
        bad.append(f"{key}: judged by {r.get('race_checker')}, not the stand-in's detector")
    elif r["races"]["reuse"] + r["races"]["schedule"] != 0:
        bad.append(f"{key}: races {r['races']}")
    if r.get("leaked_bytes", 0) != 0:
        bad.append(f"{key}: leaked {r['leaked_bytes']} bytes")
if bad:
    print(f"{what}:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"{what}: {len(runs)} cuda runs passed with the reference digests, zero races, zero leaks")
PY
}

negative() {
  local checker
  for checker in native adaptor; do
    local args=()
    [ "$checker" = adaptor ] && args=(--race-check adaptor)
    "$bin" --quiet --mode unsafe --backend cuda --require-backend cuda "${args[@]}" \
      --json "$work/negative-$checker.json" > "$work/negative-$checker.txt" \
      || { cat "$work/negative-$checker.txt" >&2; echo "negative control ($checker): verdicts differ" >&2; return 1; }
    grep '^negative control:' "$work/negative-$checker.txt"
    python3 - "$work/negative-$checker.json" "$checker" <<'PY'
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["runs"] if r["backend"] == "cuda"]
bad = [f"{r['schedule']}: checker {r.get('race_checker')}, verdict {r.get('negative_control_verdict')}"
       for r in runs
       if r.get("race_checker") != sys.argv[2] or r.get("negative_control_verdict") not in ("caught", "clean")]
if not runs or bad:
    print("negative control did not run on cuda" if not runs else "\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY
  done
}

expandable() {
  local conf="expandable_segments:True,expandable_segments_page_size_mb:2"
  "$bin" --quiet --backend cuda --require-backend cuda --alloc-conf "$conf" \
    --json "$work/expandable.json" > "$work/expandable.txt" \
    || { tail -n 20 "$work/expandable.txt" >&2; return 1; }
  check "$work/expandable.json" "suite under --alloc-conf $conf (cuMem* path)"
}

tests() {
  # The stand-in is the device: a test that skips fails.
  # --workspace: the `test` stage's feature set, so its build is reused.
  MEMREUSE_REQUIRE_DEVICE=1 cargo test --workspace --locked --quiet --test gpu --test standin \
    -- --test-threads=1
  MEMREUSE_REQUIRE_DEVICE=1 cargo test --locked --quiet -p memreuse-conformance --features cuda \
    --test cuda_backend
}

profiles() {
  local profile
  for profile in no-vm old-nccl; do
    # The conformance build's package set, so only the stand-in itself recompiles.
    cargo build --release --locked --quiet -p memreuse-conformance --features ascend,cuda \
      -p memreuse-ascend-standin -p memreuse-cuda-standin --features "memreuse-cuda-standin/$profile"
    cp "$so" "$work/$profile.so"
    install "$work/$profile" "$work/$profile.so"
    LD_LIBRARY_PATH="$work/$profile" "$bin" --quiet --backend cuda --require-backend cuda \
      --json "$work/$profile.json" > "$work/$profile.txt" || { tail -n 20 "$work/$profile.txt" >&2; return 1; }
    check "$work/$profile.json" "install profile $profile"
    LD_LIBRARY_PATH="$work/$profile" "$bin" --quiet --backend cuda --require-backend cuda \
      --alloc-conf expandable_segments:True,expandable_segments_page_size_mb:2 \
      --json "$work/$profile-expandable.json" > "$work/$profile-expandable.txt" 2>&1 || true
    python3 - "$work/$profile-expandable.json" "$profile" <<'PY'
import json, sys
runs = [r for r in json.load(open(sys.argv[1]))["runs"] if r["backend"] == "cuda"]
if sys.argv[2] == "no-vm":
    # The runner's reason names the capability; the backend's own error names the missing
    # symbol (tests/standin.rs checks that).
    bad = [r for r in runs if r["status"] != "skipped" or "virtual_memory" not in (r.get("skip_reason") or "")]
    if not runs or bad:
        print("no-vm: expandable runs must be skipped for want of the virtual_memory capability",
              [(r["status"], r.get("skip_reason")) for r in runs], file=sys.stderr)
        sys.exit(1)
    print(f"no-vm: {len(runs)} expandable runs skipped: {runs[0]['skip_reason'][:160]}")
PY
    if [ "$profile" = no-vm ]; then
      # The backend's own reason names the missing symbol (the runner's names the
      # capability): the GPU test binary gpu-scripts built, skipping its virtual-memory test.
      env -u MEMREUSE_REQUIRE_DEVICE LD_LIBRARY_PATH="$work/$profile" "$work/gpu-artifacts/tests/gpu" \
        virtual_memory_on_the_device --exact --nocapture > "$work/no-vm-gpu.txt" 2>&1 \
        || { cat "$work/no-vm-gpu.txt" >&2; return 1; }
      grep -o 'skipped: no virtual memory: .*does not export cuMem[A-Za-z]*' "$work/no-vm-gpu.txt" \
        || { echo "no-vm: the skip reason does not name the missing symbol:" >&2; cat "$work/no-vm-gpu.txt" >&2; return 1; }
    fi
  done
  # Leave the default stand-in built in target/release.
  cargo build --release --locked --quiet -p memreuse-conformance --features ascend,cuda \
    -p memreuse-ascend-standin -p memreuse-cuda-standin
}

# gpu-scripts: the scripts a GPU runner is given, end to end. gpu-build.sh compiles
# nearly nothing: the runner is the conformance build's (features ascend,cuda), the
# benchmark links against its crates (memreuse-core's negative-control, which the runner
# turns on), and the test binaries are the test stage's (dev profile of the workspace).
gpu_scripts() {
  local art="$work/gpu-artifacts" out="$work/gpu-out" rc=0
  MEMREUSE_GPU_BUILD_FEATURES=ascend,cuda MEMREUSE_GPU_BUILD_DEP_FEATURES=memreuse-core/negative-control \
    MEMREUSE_GPU_BUILD_TEST_PROFILE=workspace-dev \
    scripts/gpu-build.sh "$art" > "$work/gpu-build.txt" 2>&1 \
    || { tail -n 30 "$work/gpu-build.txt" >&2; return 1; }
  # The stand-in's 1 GiB devices: the trace scaled to 256 MiB live; its cuMemAlloc takes
  # milliseconds, so the raw driver replays 200 trace ops and 1000 pairs.
  OUT="$out" MEMREUSE_BENCH_MAX_LIVE_MIB=256 MEMREUSE_BENCH_ARGS="--raw-trace-ops 200 --raw-pairs 1000" \
    timeout --kill-after=10 300 \
    scripts/gpu-check.sh "$art" > "$work/gpu-check.txt" 2>&1 || rc=$?
  python3 - "$out" "$work/gpu-check.txt" "$rc" <<'PY'
import os, sys, tarfile
out, printed_path, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
printed = open(printed_path, encoding="utf-8", errors="replace").read()
bad = []
if rc != 0:
    bad.append(f"gpu-check.sh exited {rc}")
files = sorted(os.listdir(out)) if os.path.isdir(out) else []
if files != ["gpu-check.tar.gz", "summary.txt"]:
    bad.append(f"$OUT holds {files}, not exactly gpu-check.tar.gz and summary.txt")
summary = open(os.path.join(out, "summary.txt"), encoding="utf-8").read() if "summary.txt" in files else ""
if len(summary.encode()) > 10_000:
    bad.append(f"summary.txt is {len(summary.encode())} bytes, over 10 KB")
if printed != summary:
    extra = [l for l in printed.splitlines() if l not in summary.splitlines()]
    bad.append(f"what gpu-check.sh printed is not its summary (first other lines: {extra[:5]})")
lines = summary.splitlines()
for line in lines:
    if line.startswith(("FAIL", "SKIP")) or "problem:" in line or "panicked at" in line:
        bad.append(f"summary: {line}")
for want in ("PASS conformance.txt", "PASS bench-memreuse.txt", "PASS test-gpu.txt", "PyTorch peers: ",
             "virtual memory: test virtual_memory_on_the_device ok, granularity "):
    if not any(l.startswith(want) for l in lines):
        bad.append(f"summary has no line starting {want!r}")
peers = next((l for l in lines if l.startswith("PyTorch peers: ")), "")
if peers and not peers.endswith(" 0 skipped") and not any(" skipped: " in l for l in lines):
    bad.append(f"{peers}: no reason counted")
members = []
if "gpu-check.tar.gz" in files:
    with tarfile.open(os.path.join(out, "gpu-check.tar.gz")) as t:
        members = t.getnames()
for want in ("gpu-check/conformance.json", "gpu-check/test-gpu.txt", "gpu-check/bench-memreuse.jsonl",
             "gpu-check/bench-torch-native.jsonl", "gpu-check/bench-summary.txt"):
    if want not in members:
        bad.append(f"the archive lacks {want}")
if bad:
    print("gpu-check.sh against the stand-in:\n  " + "\n  ".join(bad), file=sys.stderr)
    print("--- what it printed:\n" + printed[-4000:], file=sys.stderr)
    sys.exit(1)
print(f"gpu-check.sh: exit 0, {len(lines)} summary lines ({len(summary.encode())} bytes), "
      f"{len(members)} archived files; {peers}")
PY
  tar -xzf "$out/gpu-check.tar.gz" -C "$work" gpu-check/conformance.json
  check "$work/gpu-check/conformance.json" "suite (modes 0-3, run by scripts/gpu-check.sh)"
}

part gpu-scripts gpu_scripts
part negative negative
part expandable expandable
part tests tests
part profiles profiles
echo "cuda-standin ok in $((SECONDS - started)) s"
