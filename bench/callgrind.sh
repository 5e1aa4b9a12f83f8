#!/usr/bin/env bash
# Instructions per malloc+free pair for workload (a), counted by callgrind: independent of
# machine load, unlike the wall-clock table. Each figure is (Ir(N2 pairs) - Ir(N1 pairs)) /
# (N2 - N1), which cancels start-up and warm-up. Needs valgrind and a release build:
#   CARGO_TARGET_DIR=/work/main/target-bench cargo build --release --bins
#   bash callgrind.sh
set -euo pipefail
bin="${CARGO_TARGET_DIR:-../target-bench}/release/pairs"
n1=10000
n2=30000
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$3" 2>&1 |
    sed -n 's/.*I *refs: *//p' | tr -d ','
}
peers=(memreuse_mock memreuse_manual cubecl_exclusive cubecl_adaptive glibc
       memreuse_manual_traced memreuse_mock_detector)
echo "| peer | (a) 4 KiB Ir/pair | (a) 2 MiB Ir/pair |"
echo "|---|---:|---:|"
for p in "${peers[@]}"; do
  row="| $p |"
  for size in 4096 2097152; do
    a=$(ir "$p" "$size" "$n1")
    b=$(ir "$p" "$size" "$n2")
    row="$row $(( (b - a) / (n2 - n1) )) |"
  done
  echo "$row"
done
