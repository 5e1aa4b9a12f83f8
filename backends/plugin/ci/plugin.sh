#!/usr/bin/env bash
# CI stage `plugin` (issue 29): backends loaded at run time through the C ABI.
#
# Follows docs/plugin-abi.md verbatim (copy the reference plugin, make, run the stock
# binary on it), then: the built-in suite in modes 0-3 on the reference C plugin and on the
# mock exported as a plugin, next to the mock linked directly (reference digests, the
# mock's digests and figures, zero leaks, races judged by the adaptor on the C plugin and
# natively on the mock plugin), the negative control, the version-policy cases through the
# binary (each with its exit code and message), and the contract kits. Budget: 2 minutes on
# 2 cores once the `test` stage has built the workspace.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root="$PWD"
target="${CARGO_TARGET_DIR:-$PWD/target}"
out="$target/plugin"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The stock runner (CI's `conformance-build` stage built it with these features) and the
# mock exported as a plugin.
cargo build --release --locked -p memreuse-conformance --features ascend,cuda
cargo build --release --locked -p memreuse-mock-plugin --lib
bin="$target/release/memreuse-conformance"
mockso="$target/release/libmemreuse_mock_plugin.so"

echo "--- docs/plugin-abi.md steps 1-3: copy the reference plugin, make, run the stock binary"
cp -r backends/plugin/host "$work/myaccel"
make -s -C "$work/myaccel" clean
make -s -C "$work/myaccel" INCLUDE="$root/backends/plugin/include"
hostso="$work/myaccel/libmemreuse_host.so"
make -s -C backends/plugin/host # the in-tree build the tests use
export MEMREUSE_BACKEND_PLUGINS="host=$hostso,mockplug=$mockso"
"$bin" list | tee "$out/list.txt" | grep -E '^  (host|mockplug) '
grep -q "host .*plugin $hostso (ABI 1.1)" "$out/list.txt"

echo "--- built-in suite, modes 0-3: the mock, the C plugin, the mock plugin"
"$bin" --quiet --backend mock --backend host --backend mockplug \
  --require-backend host --require-backend mockplug --json "$out/suite.json" --report "$out/suite"

echo "--- deterministic replay, seed 7: the mock plugin's figures are the mock's"
"$bin" --quiet --deterministic --seed 7 --backend mock --backend mockplug \
  --require-backend mockplug --json "$out/deterministic.json" --report "$out/deterministic"

echo "--- the same plugin by path: --backend plugin:PATH"
"$bin" --quiet --backend "plugin:$hostso" --require-backend "plugin:$hostso" \
  --json "$out/by-path.json" --report "$out/by-path"

echo "--- negative control: the C plugin (adaptor), the mock plugin (native, then adaptor)"
"$bin" --quiet --mode unsafe --backend host --backend mockplug --json "$out/neg.json" \
  --report "$out/neg" | grep '^negative control:'
"$bin" --quiet --mode unsafe --race-check adaptor --backend mockplug \
  --json "$out/neg-adaptor.json" --report "$out/neg-adaptor" | grep '^negative control:'

python3 - "$out/suite.json" "$out/by-path.json" "$out/neg.json" "$out/neg-adaptor.json" \
  "$out/deterministic.json" <<'PY'
import json, sys
suite, by_path, neg, neg_adaptor, det = (json.load(open(p)) for p in sys.argv[1:6])
runs = {}
for r in suite["runs"] + by_path["runs"]:
    b = "by-path" if r["backend"].startswith("plugin:") else r["backend"]
    runs.setdefault(b, {})[(r["schedule"], r["mode"])] = r
mock = runs.get("mock", {})
bad = []
checker = {"host": "adaptor", "by-path": "adaptor", "mockplug": "native"}
# Figures that depend on timing (wall clock, the watchdog thread) are not compared.
timing = {"backend", "wall_ms", "step_ms_median", "shelf_unstashed_by_watchdog"}
for b in ("host", "by-path", "mockplug"):
    got = runs.get(b, {})
    if set(got) != set(mock):
        bad.append(f"{b}: ran {len(got)} (schedule, mode) pairs, the mock {len(mock)}")
    for key, r in sorted(got.items()):
        m = mock.get(key, {})
        if r["status"] != "passed":
            bad.append(f"{b} {key}: {r['status']} {r.get('error')} {r.get('skip_reason')}")
        if r["digest"] != r.get("reference_digest") or r["digest"] != m.get("digest"):
            bad.append(f"{b} {key}: digest {r['digest']}, reference {r.get('reference_digest')}, mock {m.get('digest')}")
        if r.get("leaked_bytes"):
            bad.append(f"{b} {key}: leaked {r['leaked_bytes']} bytes")
        if r.get("race_checker") != checker[b] or sum((r.get("races") or {"none": 1}).values()):
            bad.append(f"{b} {key}: races {r.get('races')} judged by {r.get('race_checker')}, want none by {checker[b]}")
det_runs = {}
for r in det["runs"]:
    det_runs.setdefault(r["backend"], {})[(r["schedule"], r["mode"])] = r
dm, dp = det_runs.get("mock", {}), det_runs.get("mockplug", {})
if not dp or set(dm) != set(dp):
    bad.append(f"deterministic: the mock plugin ran {len(dp)} pairs, the mock {len(dm)}")
# Also free-running in a deterministic replay (the mock's deterministic mode orders device
# work, not host threads): in mode 2 the watchdog thread decides when a shelf's tensors
# return, which moves the peaks (free-before-wait: 8192 or 10240 bytes allocated between
# two runs of the mock itself); oom-pressure's retry chain meets the other rank's frees
# at varying points (7 or 8 retries and device calls between two mock runs).
watchdog_timed = {"peak_allocated_bytes", "peak_reserved_bytes"}
retry_timed = {"alloc_retries", "device_alloc_calls", "device_free_calls"} | watchdog_timed
for key, r in sorted(dp.items()):
    skip = timing | (watchdog_timed if str(key[1]) == "2" else set()) | (
        retry_timed if key[0] == "oom-pressure" else set())
    for f in sorted((set(r) | set(dm.get(key, {}))) - skip):
        if r.get(f) != dm.get(key, {}).get(f):
            bad.append(f"deterministic mockplug {key}: {f} {r.get(f)} != mock {dm.get(key, {}).get(f)}")
for name, report, want in (("neg", neg, {"host": "adaptor", "mockplug": "native"}),
                           ("neg-adaptor", neg_adaptor, {"mockplug": "adaptor"})):
    for b, c in want.items():
        judged = [r for r in report["runs"] if r["backend"] == b]
        if not judged:
            bad.append(f"{name}: no negative-control runs on {b}")
        for r in judged:
            if r.get("race_checker") != c or r.get("negative_control_verdict") not in ("caught", "clean"):
                bad.append(f"{name} {b} {r['schedule']}: checker {r.get('race_checker')}, verdict {r.get('negative_control_verdict')}")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
caught = sum(1 for r in neg["runs"] + neg_adaptor["runs"] if r.get("negative_control_verdict") == "caught")
print(f"plugin suite ok: {sum(len(v) for v in runs.values())} runs; the C plugin and the mock plugin "
      f"give the reference digests, the mock plugin the mock's figures ({len(dp)} deterministic "
      f"runs, field for field); zero leaks, zero races; "
      f"negative control judged ({caught} caught)")
PY

echo "--- version policy through the binary (exit code and message of each case)"
variant() { # NAME: build variants.c with -DVARIANT_NAME
  cc -std=c99 -Wall -Wextra -Werror -pedantic -fPIC -fvisibility=hidden -shared -O1 \
    -I backends/plugin/host -I backends/plugin/include -DVARIANT_"$1" \
    -o "$work/lib$1.so" backends/plugin/ci/variants.c -lpthread -lm
  echo "$work/lib$1.so"
}
expect() { # CODE TEXT -- command...: the command exits CODE and prints TEXT
  local code=$1 text=$2 rc=0
  shift 3
  "$@" >"$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$text" "$work/out.txt"; then
    echo "FAILED: want exit $code with \"$text\", got exit $rc:" >&2
    tail -5 "$work/out.txt" >&2
    exit 1
  fi
  echo "  exit $rc: $(grep -F -m1 -- "$text" "$work/out.txt" | cut -c1-150)"
}
unset MEMREUSE_BACKEND_PLUGINS
for v in OLDER_MINOR NEWER_MINOR; do
  so=$(variant "$v")
  expect 0 "passed, 0 failed" -- "$bin" --quiet --backend "plugin:$so" --require-backend "plugin:$so" --report "$work/$v"
done
so=$(variant WRONG_MAJOR)
expect 2 "ABI 2.1 is not compatible with this host's ABI 1.1" -- "$bin" --backend "plugin:$so"
so=$(variant MISSING_ENTRY)
expect 2 "required entry \`malloc\` is NULL" -- "$bin" --backend "plugin:$so"
so=$(variant NULL_HANDLE)
expect 1 "\`world_open\` reported success but returned no handle" -- \
  "$bin" --backend "plugin:$so" --require-backend "plugin:$so" --report "$work/null"
expect 2 "no such file" -- "$bin" --backend "plugin:$work/absent.so"
echo "not a library" >"$work/text.so"
expect 2 "cannot be loaded as a shared library" -- "$bin" --backend "plugin:$work/text.so"
expect 2 "has no \`=\`" -- env MEMREUSE_BACKEND_PLUGINS="host" "$bin" list
# A loaded plugin whose vendor driver is missing: its runs are skipped (exit 0) unless
# the backend is required (exit 1), as for a compiled-in backend.
expect 0 "MEMREUSE_HOST_PLUGIN_NO_DRIVER" -- env MEMREUSE_HOST_PLUGIN_NO_DRIVER=1 \
  "$bin" --backend "plugin:$hostso" --report "$work/nodriver"
expect 1 "MEMREUSE_HOST_PLUGIN_NO_DRIVER" -- env MEMREUSE_HOST_PLUGIN_NO_DRIVER=1 \
  "$bin" --backend "plugin:$hostso" --require-backend "plugin:$hostso" --report "$work/nodriver-req"

echo "--- contract kits and version-policy tests (built by the test stage)"
cargo test --locked -q -p memreuse-plugin -p memreuse-mock-plugin
echo "plugin stage ok"
