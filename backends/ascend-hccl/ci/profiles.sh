#!/usr/bin/env bash
# The Ascend FFI path through stand-in install profiles (README "Ascend backend").
#
# Profiles that differ in exported symbols are separate builds of the stand-in
# (backends/ascend-hccl/standin, features `cann80` and `cann85`); a behaviour profile is
# chosen at run time (MEMREUSE_STANDIN_BEHAVIOUR). For each install profile this script
# builds the variant, places it in its own directory as libascendcl.so + libhccl.so (plus
# the variant's libhcomm.so for CANN 8.5), runs `ascend_probe` (the loader's view of the
# profile, a grouped ring and a barrier) and the built-in suite in modes 0-3 on the ascend
# backend, and checks every run passed with the reference digest, with the race detector
# and zero races:
#   default  all symbols in libhccl.so (probe only: conformance.sh runs the suite on it)
#   cann80   no HcclGroupStart/End/Barrier (CANN 8.0-8.3): ungrouped point-to-point in a
#            deadlock-free order, barrier as a one-element all_reduce
#   cann85   HcclGroupStart/End in libhcomm.so, which libhccl.so links (CANN 8.5+), run
#            with behaviour `async-error-unsupported` (HcclGetCommAsyncError answers
#            HCCL_E_NOT_SUPPORT, as on Ascend 950)
# Needs the release conformance binary (the conformance-build stage); leaves the default
# stand-in built in target/release.
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
bin="$target/release/memreuse-conformance"
if [ ! -x "$bin" ]; then
  echo "missing $bin: cargo build --release -p memreuse-conformance --features ascend first" >&2
  exit 1
fi
work="$(mktemp -d)"; echo "profiles work dir: $work"
trap '[ -n "${KEEP_PROFILES:-}" ] || rm -rf "$work"' EXIT
so="$target/release/libmemreuse_ascend_standin.so"
probe="$target/release/examples/ascend_probe"

# Builds the stand-in with `$1` (a feature or "default") and the probe, with the same
# packages and features as the conformance build (so nothing else rebuilds), and lays the
# libraries out in $work/$1.
build() {
  local profile=$1 features=()
  [ "$profile" = default ] || features=(--features "memreuse-ascend-standin/$profile")
  cargo build --release --locked --quiet -p memreuse-conformance --features ascend \
    -p memreuse-ascend -p memreuse-ascend-standin "${features[@]}" \
    --lib --example ascend_probe --message-format=json > "$work/$profile.cargo.json"
  local dir="$work/$profile"
  mkdir -p "$dir"
  # One file under both names: both must be one loaded instance.
  cp "$so" "$dir/libmemreuse_ascend_standin.so"
  ln -s libmemreuse_ascend_standin.so "$dir/libascendcl.so"
  ln -s libmemreuse_ascend_standin.so "$dir/libhccl.so"
  if [ "$profile" = cann85 ]; then
    local out
    out="$(python3 - "$work/$profile.cargo.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "build-script-executed" and "memreuse-ascend-standin" in m["package_id"]:
        print(m["out_dir"])
PY
)"
    cp "$out/libhcomm.so" "$dir/libhcomm.so"
  fi
  cp "$probe" "$work/$profile.probe"
}

suite() {
  local profile=$1
  MEMREUSE_ASCEND_LIB_DIR="$work/$profile" "$bin" --quiet --backend ascend \
    --json "$work/$profile.report.json" > "$work/$profile.out" || {
    cat "$work/$profile.out" >&2
    echo "profile $profile: the suite failed" >&2
    return 1
  }
  python3 - "$profile" "$work/$profile.report.json" <<'PY'
import json, sys
profile, path = sys.argv[1], sys.argv[2]
runs = [r for r in json.load(open(path))["runs"] if r["backend"] == "ascend"]
bad = [] if runs else ["no ascend runs"]
for r in runs:
    key = f"{r['schedule']} mode {r['mode']}"
    if r["status"] != "passed":
        bad.append(f"{key}: {r['status']} {r.get('error')}")
    if r["digest"] != r.get("reference_digest"):
        bad.append(f"{key}: digest {r['digest']} != reference {r.get('reference_digest')}")
    if r["races"] is None:
        bad.append(f"{key}: ran without the stand-in's race detector")
    elif r["races"]["reuse"] + r["races"]["schedule"] != 0:
        bad.append(f"{key}: races {r['races']}")
if bad:
    print(f"profile {profile}:\n" + "\n".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"profile {profile}: {len(runs)} ascend runs passed with the reference digests, zero races")
PY
}

for profile in cann80 cann85 default; do
  build "$profile"
done
for profile in default cann80 cann85; do
  MEMREUSE_ASCEND_LIB_DIR="$work/$profile" "$work/$profile.probe" "$profile"
done
suite cann80
MEMREUSE_STANDIN_BEHAVIOUR=async-error-unsupported suite cann85
