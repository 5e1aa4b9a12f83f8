#!/usr/bin/env bash
# Instructions per malloc+free pair, counted by callgrind: independent of machine load,
# unlike the wall-clock table.
# - (a) cached pair: (Ir(N2 pairs) - Ir(N1 pairs)) / (N2 - N1), which cancels start-up and
#   warm-up;
# - (b) trace: only the instructions inside `run_trace` (`--toggle-collect`, so generating
#   the trace is not counted), over the pairs of a TRACE_OPS-op prefix of the 1M-op trace.
# Needs valgrind and a release build:
#   CARGO_TARGET_DIR=../target-bench cargo build --release --bins
#   bash callgrind.sh                      # every peer
#   BIN=/path/to/old/pairs bash callgrind.sh memreuse_mock cubecl_exclusive   # chosen peers
set -euo pipefail
bin="${BIN:-${CARGO_TARGET_DIR:-../target-bench}/release/pairs}"
n1=10000
n2=30000
trace_ops="${TRACE_OPS:-300000}"
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
    sed -n 's/.*I *refs: *//p' | tr -d ','
}
if [ "$#" -gt 0 ]; then
  peers=("$@")
else
  peers=(memreuse_mock memreuse_manual cubecl_exclusive cubecl_adaptive glibc
         offset_allocator rlsf memreuse_manual_traced memreuse_mock_detector)
fi
echo "| peer | (a) 4 KiB Ir/pair | (a) 2 MiB Ir/pair | (b) trace Ir/pair ($trace_ops ops) |"
echo "|---|---:|---:|---:|"
for p in "${peers[@]}"; do
  row="| $p |"
  for size in 4096 2097152; do
    a=$(ir "$bin" "$p" "$size" "$n1")
    b=$(ir "$bin" "$p" "$size" "$n2")
    row="$row $(( (b - a) / (n2 - n1) )) |"
  done
  pairs=$("$bin" "$p" trace "$trace_ops" | sed -n 's/^\([0-9]*\) pairs.*/\1/p')
  if [ -n "$pairs" ]; then
    t=$(ir --toggle-collect='memreuse_bench::run_trace*' "$bin" "$p" trace "$trace_ops")
    row="$row $(( t / pairs )) |"
  else
    row="$row n/a |"
  fi
  echo "$row"
done
