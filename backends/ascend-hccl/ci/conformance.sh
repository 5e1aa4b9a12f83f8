#!/usr/bin/env bash
# The conformance suite through the Ascend FFI path, against the stand-in library.
#
# Places the release stand-in under the names libascendcl.so and libhccl.so in a temporary
# directory, points MEMREUSE_ASCEND_LIB_DIR there (only this script does), and runs
# .ci/conformance: with the conformance binary built `--features ascend`, every stage of it
# (modes 0-3 against the reference digests, the deterministic replay, the negative control)
# then covers both the mock and the ascend backend; the runner judges the negative control
# (its exit status). Afterwards it checks that every ascend run exists, has the mock's
# digest, ran with a race checker, and that the negative control ran on ascend natively and
# through the adaptor with matching verdicts.
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
so="$target/release/libmemreuse_ascend_standin.so"
if [ ! -f "$so" ]; then
  echo "missing $so: cargo build --release -p memreuse-ascend-standin first" >&2
  exit 1
fi
libdir="$(mktemp -d)"
trap 'rm -rf "$libdir"' EXIT
ln -s "$so" "$libdir/libascendcl.so"
ln -s "$so" "$libdir/libhccl.so"
export MEMREUSE_ASCEND_LIB_DIR="$libdir"
# A stand-in that fails to load must fail CI, not skip every ascend run.
export MEMREUSE_CONFORMANCE_REQUIRE=ascend

.ci/conformance

out="$target/conformance"
python3 - "$out/report.json" "$out/negative-control.json" "$out/negative-control-adaptor.json" <<'PY'
import json, sys
main, neg, neg_adaptor = (json.load(open(p)) for p in sys.argv[1:4])
runs = {}
for r in main["runs"]:
    runs.setdefault(r["backend"], {})[(r["schedule"], r["mode"])] = r
mock, ascend = runs.get("mock", {}), runs.get("ascend", {})
bad = []
if not ascend:
    bad.append("no ascend runs: is the conformance binary built with --features ascend?")
if set(mock) != set(ascend):
    bad.append(f"ascend ran {len(ascend)} (schedule, mode) pairs, mock {len(mock)}")
for key, r in sorted(ascend.items()):
    m = mock.get(key)
    if m is None:
        continue
    if r["status"] != "passed":
        bad.append(f"ascend {key}: {r['status']} {r.get('error')}")
    if r["digest"] != m["digest"]:
        bad.append(f"ascend {key}: digest {r['digest']} != mock {m['digest']}")
    if r["races"] is None:
        bad.append(f"ascend {key}: ran without a race checker")
# The negative control was judged by the runner (.ci/conformance exits on a mismatch);
# here only check that it covered the FFI path, natively and through the adaptor.
for name, report, checker in (("native", neg, "native"), ("adaptor", neg_adaptor, "adaptor")):
    judged = [r for r in report["runs"] if r["backend"] == "ascend"]
    if not judged:
        bad.append(f"the {name} negative control did not run on ascend")
    for r in judged:
        if r.get("race_checker") != checker or r.get("negative_control_verdict") not in ("caught", "clean"):
            bad.append(f"ascend {r['schedule']} ({name}): checker {r.get('race_checker')}, verdict {r.get('negative_control_verdict')}")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
caught = sum(1 for r in neg_adaptor["runs"] if r["backend"] == "ascend" and r.get("negative_control_verdict") == "caught")
print(f"ascend conformance ok: {len(ascend)} runs through the stand-in FFI path, digests equal "
      f"to the mock's, zero races; the runner's negative-control verdicts match on ascend "
      f"natively and through the adaptor ({caught} caught)")
PY
