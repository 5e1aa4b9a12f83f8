#!/usr/bin/env bash
# The plugin boundary's cost per call, counted by callgrind: instructions per call of the
# mock through libmemreuse_mock_plugin.so minus the mock linked directly, from the slope
# between two call counts (the fixed setup cancels). Not a CI stage (callgrind is slow);
# run by hand: backends/plugin/ci/boundary-cost.sh [N1 N2]
set -euo pipefail
cd "$(dirname "$0")/../../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
n1=${1:-200}
n2=${2:-400}
cargo build --release --locked -p memreuse-mock-plugin --lib --example boundary_cost >&2
bin="$target/release/examples/boundary_cost"
so="$target/release/libmemreuse_mock_plugin.so"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
count() { # how n what: total instructions (every thread)
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$bin" "$1" "$2" "$3" "$so" \
    2>"$work/log" >/dev/null
  local ir
  ir=$(grep -h '^summary:' "$work"/cg.* | awk '{s += $2} END {print s}')
  rm -f "$work"/cg.*
  echo "$ir"
}
printf '| call | mock direct (instr/call) | mock through the plugin (instr/call) | boundary (instr/call) |\n'
printf '|---|---|---|---|\n'
for what in query memset all_reduce; do
  d1=$(count direct "$n1" "$what"); d2=$(count direct "$n2" "$what")
  p1=$(count plugin "$n1" "$what"); p2=$(count plugin "$n2" "$what")
  python3 -c "
n = $n2 - $n1
d, p = ($d2 - $d1) / n, ($p2 - $p1) / n
print(f'| $what | {d:.0f} | {p:.0f} | {p - d:+.0f} |')"
done
