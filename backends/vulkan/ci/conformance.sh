#!/usr/bin/env bash
# The Vulkan backend on Mesa's lavapipe (a conformant Vulkan 1.3 driver on the CPU).
#
# 1. installs the loader and lavapipe with apt when missing (mesa-vulkan-drivers libvulkan1)
#    and pins the driver (VK_DRIVER_FILES), with llvmpipe's threads bounded (LP_NUM_THREADS);
# 2. runs the backend's own test binaries (those `cargo test --workspace` built in the
#    `test` stage; run alone, this builds them) with MEMREUSE_REQUIRE_DEVICE=1: the device
#    and communicator contract kits and the backend's tests on lavapipe, where a missing
#    driver fails instead of skipping;
# 3. builds the conformance runner with `--features vulkan` and runs the built-in suite in
#    modes 0-3 with `--backend vulkan --require-backend vulkan` (race checking through the
#    happens-before adaptor: lavapipe runs one device's work in submission order, so no
#    missing wait shows in timing), then the negative control through the adaptor;
# 4. checks from the JSON: every run passed with the reference digest, zero leaks, zero
#    races judged by the adaptor, nothing skipped; every negative-control verdict matches
#    its declaration (the runner judges it too: exit 0);
# 5. checks that without a loader (MEMREUSE_VULKAN_LOADER) or a driver (VK_DRIVER_FILES)
#    `--backend vulkan` is skipped with the reason (exit 0) and that `--require-backend
#    vulkan` then fails (exit 1).
#
# Leaves target/release/memreuse-conformance built with `--features vulkan` (later stages
# do not use it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target/conformance/vulkan"
mkdir -p "$out"

t0=$SECONDS
if ! dpkg -s mesa-vulkan-drivers libvulkan1 >/dev/null 2>&1; then
  echo "--- apt-get install mesa-vulkan-drivers libvulkan1"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    mesa-vulkan-drivers libvulkan1 >/dev/null
fi
echo "--- packages ready in $((SECONDS - t0)) s"
icd="/usr/share/vulkan/icd.d/lvp_icd.$(uname -m).json"
if [ ! -f "$icd" ]; then
  echo "lavapipe's driver file $icd is missing after installing mesa-vulkan-drivers" >&2
  exit 1
fi
export VK_DRIVER_FILES="$icd"
export LP_NUM_THREADS="${LP_NUM_THREADS:-2}"

t0=$SECONDS
echo "--- backend tests on lavapipe (contract kits, device, communicator, races)"
# The binaries `cargo test --workspace` built (the `test` stage; cargo only checks them
# here): `cargo test -p memreuse-vulkan` would resolve features differently and rebuild
# memreuse-core and its dependents for two minutes.
tests=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["profile"]["test"] and "/backends/vulkan/" in m["manifest_path"]:
        print(m["executable"])
')
if [ -z "$tests" ]; then
  echo "no memreuse-vulkan test binary found" >&2
  exit 1
fi
for t in $tests; do
  MEMREUSE_REQUIRE_DEVICE=1 "$t" -q
done
echo "--- tests took $((SECONDS - t0)) s"

t0=$SECONDS
cargo build --release --locked -q -p memreuse-conformance --features vulkan
echo "--- runner build took $((SECONDS - t0)) s"
bin="$target/release/memreuse-conformance"

t0=$SECONDS
echo "--- built-in suite on vulkan, modes 0-3"
"$bin" --quiet --backend vulkan --require-backend vulkan --json "$out/report.json" \
  --report "$out/report" > "$out/suite.txt"
tail -1 "$out/suite.txt"
echo "--- suite took $((SECONDS - t0)) s"

t0=$SECONDS
echo "--- negative control on vulkan (through the race-checking adaptor; exit 0 = every verdict matches)"
"$bin" --quiet --backend vulkan --require-backend vulkan --mode unsafe \
  --json "$out/negative-control.json" > "$out/negative-control.txt"
grep '^negative control:' "$out/negative-control.txt"
echo "--- negative control took $((SECONDS - t0)) s"

echo "--- without a loader or a driver: skipped with the reason; required: exit 1"
set +e
MEMREUSE_VULKAN_LOADER=/nonexistent/libvulkan.so.1 "$bin" --quiet --backend vulkan \
  --json "$out/no-loader.json" > "$out/no-loader.txt" 2>&1
rc_skip=$?
MEMREUSE_VULKAN_LOADER=/nonexistent/libvulkan.so.1 "$bin" --quiet --backend vulkan \
  --require-backend vulkan --json "$out/no-loader-required.json" > "$out/no-loader-required.txt" 2>&1
rc_required=$?
VK_DRIVER_FILES=/nonexistent/icd.json "$bin" --quiet --backend vulkan \
  --json "$out/no-driver.json" > "$out/no-driver.txt" 2>&1
rc_no_driver=$?
set -e

python3 - "$out" "$rc_skip" "$rc_required" "$rc_no_driver" <<'PY'
import json, sys
out, rc_skip, rc_req, rc_no_driver = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
main = json.load(open(f"{out}/report.json"))
neg = json.load(open(f"{out}/negative-control.json"))
skip = json.load(open(f"{out}/no-loader.json"))
no_driver = json.load(open(f"{out}/no-driver.json"))
bad = []
runs = main["runs"]
if not runs:
    bad.append("no vulkan runs")
for r in runs:
    key = f"{r['schedule']} mode {r['mode']}"
    if r["backend"] != "vulkan":
        bad.append(f"{key}: backend {r['backend']}")
    if r["status"] != "passed":
        bad.append(f"{key}: {r['status']} {r.get('error') or r.get('skip_reason')}")
    if r["digest"] != r.get("reference_digest"):
        bad.append(f"{key}: digest {r['digest']} != reference {r.get('reference_digest')}")
    if r["leaked_bytes"] != 0:
        bad.append(f"{key}: leaked {r['leaked_bytes']} bytes")
    if r.get("race_checker") != "adaptor" or r["races"] is None:
        bad.append(f"{key}: races judged by {r.get('race_checker')}, not the adaptor")
    elif r["races"]["reuse"] + r["races"]["schedule"] != 0:
        bad.append(f"{key}: races {r['races']}")
caught = 0
for r in neg["runs"]:
    expect = r.get("negative_control_expects_reuse_race")
    found = (r["races"] or {}).get("reuse", 0) > 0
    if r.get("race_checker") != "adaptor":
        bad.append(f"negative control {r['schedule']}: judged by {r.get('race_checker')}")
    if expect is None or found != expect:
        bad.append(f"negative control {r['schedule']}: declared {expect}, found {r['races']}")
    caught += found
if not neg["runs"]:
    bad.append("the negative control did not run on vulkan")
if rc_skip != 0:
    bad.append(f"without a loader the runner exited {rc_skip}, expected 0 (skipped)")
for r in skip["runs"]:
    reason = r.get("skip_reason") or ""
    if r["status"] != "skipped" or "/nonexistent/libvulkan.so.1" not in reason:
        bad.append(f"without a loader {r['schedule']}: {r['status']} ({reason})")
if rc_no_driver != 0:
    bad.append(f"without a driver the runner exited {rc_no_driver}, expected 0 (skipped)")
for r in no_driver["runs"]:
    reason = r.get("skip_reason") or ""
    if r["status"] != "skipped" or "no Vulkan driver found" not in reason:
        bad.append(f"without a driver {r['schedule']}: {r['status']} ({reason})")
if rc_req != 1:
    bad.append(f"--require-backend vulkan without a loader exited {rc_req}, expected 1")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"vulkan conformance ok on lavapipe: {len(runs)} runs passed with reference digests, "
      f"zero leaks, zero races (adaptor); negative control caught reuse races on {caught} of "
      f"{len(neg['runs'])} schedules, as declared; without a loader or driver: skipped, and "
      f"--require-backend fails")
PY
