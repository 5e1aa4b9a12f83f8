#!/usr/bin/env bash
# Builds, here (no GPU needed), everything scripts/gpu-check.sh runs on a GPU machine that
# has CUDA, Python and PyTorch but no Rust toolchain and no network:
#   - memreuse-conformance with --features cuda (release),
#   - the memreuse-cuda test binaries (release, `cargo test --no-run`),
#   - the allocator benchmark memreuse-cuda-bench (release) and its PyTorch peer,
#     scripts/gpu_peer_bench.py (copied as is),
# stripped, into one git-ignored folder (default gpu-artifacts/, under 64 MiB in all), with
# a manifest naming each file.
# Usage: scripts/gpu-build.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:-$PWD/gpu-artifacts}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
limit=$((64 * 1024 * 1024))
export CARGO_TERM_COLOR=never

rm -rf "$out"
mkdir -p "$out/bin" "$out/tests" "$out/scripts"

# MEMREUSE_GPU_BUILD_FEATURES: the runner's features (default `cuda`); CI passes
# `ascend,cuda` to reuse the conformance-build stage's binary instead of building another.
features="${MEMREUSE_GPU_BUILD_FEATURES:-cuda}"
echo "--- conformance runner (release, --features $features)"
cargo build --release --locked -p memreuse-conformance --features "$features"
cp "$target/release/memreuse-conformance" "$out/bin/"

# MEMREUSE_GPU_BUILD_DEP_FEATURES: extra `--features` for the benchmark and test builds
# (unset: none). CI passes `memreuse-core/negative-control`, the feature the runner turns on
# in memreuse-core, so both builds reuse the conformance-build stage's compiled crates
# instead of compiling the workspace again.
dep_features=(${MEMREUSE_GPU_BUILD_DEP_FEATURES:+--features "$MEMREUSE_GPU_BUILD_DEP_FEATURES"})
echo "--- allocator benchmark (release)"
cargo build --release --locked -p memreuse-cuda --bin memreuse-cuda-bench ${dep_features[@]+"${dep_features[@]}"}
cp "$target/release/memreuse-cuda-bench" "$out/bin/"
cp scripts/gpu_peer_bench.py "$out/scripts/"

# MEMREUSE_GPU_BUILD_TEST_PROFILE: `release` (default) builds memreuse-cuda's test
# binaries; `workspace-dev` takes them from `cargo test --workspace --no-run` in the dev
# profile (CI: the test stage built exactly those, so nothing compiles).
if [ "${MEMREUSE_GPU_BUILD_TEST_PROFILE:-release}" = workspace-dev ]; then
  echo "--- memreuse-cuda test binaries (dev profile of the workspace build, --no-run)"
  test_build=(cargo test --locked --workspace --no-run --message-format=json)
else
  echo "--- memreuse-cuda test binaries (release, --no-run)"
  test_build=(cargo test --release --locked -p memreuse-cuda --no-run --message-format=json ${dep_features[@]+"${dep_features[@]}"})
fi
"${test_build[@]}" | python3 -c '
import json, sys
def package(msg):
    # "path+file:///..#memreuse-cuda@0.1.0" (cargo 1.77+) or "memreuse-cuda 0.1.0 (path+..)".
    pid = msg.get("package_id", "")
    return pid.rsplit("#", 1)[1].split("@")[0] if "#" in pid else pid.split(" ")[0]
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    exe = msg.get("executable")
    if (msg.get("reason") == "compiler-artifact" and exe and msg.get("profile", {}).get("test")
            and package(msg) == "memreuse-cuda"):
        print(msg["target"]["name"], exe)
' > "$out/tests.list.tmp"
: > "$out/manifest.txt"
while read -r name exe; do
  cp "$exe" "$out/tests/$name"
  echo "tests/$name" >> "$out/manifest.txt"
done < "$out/tests.list.tmp"
rm -f "$out/tests.list.tmp"
printf '%s\n' bin/memreuse-conformance bin/memreuse-cuda-bench scripts/gpu_peer_bench.py \
  >> "$out/manifest.txt"

if command -v strip >/dev/null 2>&1; then
  strip "$out"/bin/* "$out"/tests/*
else
  echo "strip not found: copying unstripped binaries" >&2
fi
chmod +x "$out"/bin/* "$out"/tests/*
git rev-parse HEAD > "$out/commit.txt" 2>/dev/null || echo unknown > "$out/commit.txt"

size=$(du -sb "$out" | cut -f1)
echo "--- $out: $(wc -l < "$out/manifest.txt") files, $((size / 1024 / 1024)) MiB"
cat "$out/manifest.txt"
if [ "$size" -ge "$limit" ]; then
  echo "gpu artifacts are $size bytes, over the 64 MiB limit" >&2
  exit 1
fi
