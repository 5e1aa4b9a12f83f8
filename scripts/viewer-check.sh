#!/usr/bin/env bash
# Opens memreuse snapshot pickles with PyTorch's own memory viewer: runs the entry points of
# torch/cuda/_memory_viz.py on each pickle, then loads the generated HTML pages (which run
# MemoryViz.js) in headless Chromium, reports console errors and takes screenshots.
# Not run in CI: it needs PyTorch's viewer sources, which this repository does not ship.
#
# Usage: scripts/viewer-check.sh VIZ_DIR SNAPSHOT_DIR_OR_FILE... [-o OUT_DIR] [--max N]
#                                [--no-browser]
#
# VIZ_DIR holds, copied from your own PyTorch:
#   _memory_viz.py          torch/cuda/_memory_viz.py of an install
#                           (python -c "import torch, os; print(os.path.dirname(torch.__file__))")
#   MemoryViz.js            torch/utils/viz/MemoryViz.js of a source checkout of the same
#   process_alloc_data.js   torch/utils/viz/process_alloc_data.js (newer PyTorch imports it)
#   flamegraph.pl           optional: Brendan Gregg's FlameGraph script, for `segments` and
#                           `memory` (without it _memory_viz.py downloads it; skipped here)
# Wheels do not ship MemoryViz.js: the HTML that trace_plot writes imports it from a CDN
# (the `main` branch of PyTorch). Offline, this script serves the local copy instead, and
# d3 from the npm package d3@7 (installed into OUT_DIR/web by npm).
#
# Needs: python3, node + npm, chromium (apt-get install chromium). No torch import: the
# script runs _memory_viz.py as a file (it imports torch only for profiler input).
# Exit status: 0 when every entry point and every page ran without an error, 1 otherwise.
set -u -o pipefail

usage() { sed -n '2,22p' "$0"; exit 2; }
[ $# -ge 2 ] || usage
VIZ=$(cd "$1" && pwd) || usage
shift
OUT=/tmp/memreuse-viewer-check
MAX=0
BROWSER=1
INPUTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -o) OUT=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --no-browser) BROWSER=0; shift ;;
    -h|--help) usage ;;
    *) INPUTS+=("$1"); shift ;;
  esac
done
for f in _memory_viz.py MemoryViz.js; do
  [ -f "$VIZ/$f" ] || { echo "missing $VIZ/$f" >&2; exit 2; }
done
CHROME=${CHROME:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
[ -n "$CHROME" ] || [ "$BROWSER" = 0 ] || { echo "no chromium found (set CHROME=)" >&2; exit 2; }

mkdir -p "$OUT"/{text,flame,html,shots,web}
OUT=$(cd "$OUT" && pwd)
PICKLES=()
for i in "${INPUTS[@]}"; do
  if [ -d "$i" ]; then
    while IFS= read -r f; do PICKLES+=("$f"); done < <(find "$i" -name '*.pickle' | sort)
  else
    PICKLES+=("$i")
  fi
done
if [ "$MAX" -gt 0 ] && [ "${#PICKLES[@]}" -gt "$MAX" ]; then
  PICKLES=("${PICKLES[@]:0:$MAX}")
fi
[ "${#PICKLES[@]}" -gt 0 ] || { echo "no .pickle files" >&2; exit 2; }

FAILED=0
LOG="$OUT/python.log"
: > "$LOG"
# flamegraph.pl: _memory_viz.py looks in ~/.cache; a private HOME keeps the user's clean.
export HOME="$OUT/home"
mkdir -p "$HOME/.cache"
HAVE_FLAME=0
if [ -f "$VIZ/flamegraph.pl" ]; then
  cp "$VIZ/flamegraph.pl" "$HOME/.cache/flamegraph.pl" && chmod +x "$HOME/.cache/flamegraph.pl"
  HAVE_FLAME=1
fi

run() { # name, command...
  local name=$1; shift
  if "$@" >> "$LOG.tmp" 2>&1; then
    echo "ok   $name" >> "$LOG"
  else
    echo "FAIL $name" >> "$LOG"; sed 's/^/     /' "$LOG.tmp" | tail -20 >> "$LOG"; FAILED=1
  fi
  rm -f "$LOG.tmp"
}

MV="$VIZ/_memory_viz.py"
prev=""
for f in "${PICKLES[@]}"; do
  b=$(basename "$f" .pickle)
  run "stats $b"        sh -c 'python3 "$0" stats "$1" > "$2"' "$MV" "$f" "$OUT/text/$b.stats.txt"
  run "trace $b"        sh -c 'python3 "$0" trace "$1" > "$2"' "$MV" "$f" "$OUT/text/$b.trace.txt"
  if [ "$HAVE_FLAME" = 1 ]; then
    run "segments $b"   python3 "$MV" segments "$f" -o "$OUT/flame/$b.segments.svg"
    run "memory $b"     python3 "$MV" memory "$f" -o "$OUT/flame/$b.memory.svg"
    # `_memory_viz.py compare A B` hands compare() the whole snapshot dicts and fails on
    # any snapshot (PyTorch's CLI bug); compare() itself takes the segment lists.
    [ -n "$prev" ] && run "compare $(basename "$prev" .pickle) $b" python3 - "$VIZ" "$prev" "$f" "$OUT/flame/$b.compare.svg" <<'PY'
import pickle, sys
sys.path.insert(0, sys.argv[1])
import _memory_viz as m
before, after = (pickle.load(open(p, "rb")) for p in sys.argv[2:4])
keys = [{(s["address"], s["total_size"]) for s in d["segments"]} for d in (before, after)]
if keys[0] == keys[1]:  # flamegraph.pl fails on an empty input: nothing to compare
    print("same segments: compare skipped")
else:
    open(sys.argv[4], "w").write(m.compare(before["segments"], after["segments"]))
PY
  fi
  run "trace_plot $b"   python3 "$MV" trace_plot "$f" -o "$OUT/html/$b.trace_plot.html"
  run "segment_plot $b" python3 "$MV" segment_plot "$f" -o "$OUT/html/$b.segment_plot.html"
  # The same page around the file's own bytes (trace_plot re-pickles with Python's
  # pickle; this one feeds the browser's unpickler exactly what memreuse wrote, as a
  # drag-and-drop onto the viewer would).
  run "raw_plot $b" python3 - "$VIZ" "$f" "$OUT/html/$b.raw.html" <<'PY'
import base64, json, sys
sys.path.insert(0, sys.argv[1])
import _memory_viz as m
raw = open(sys.argv[2], "rb").read()
raw += b"\x00" * (3 - len(raw) % 3)
files = json.dumps([{"name": "raw.pickle", "base64": base64.b64encode(raw).decode()}])
html = m._memory_viz_template.replace("$VIZ_KIND", repr("Allocator State History")).replace("$SNAPSHOT", files)
open(sys.argv[3], "w").write(html)
PY
  prev=$f
done
echo "python entry points: $(grep -c '^ok' "$LOG") ok, $(grep -c '^FAIL' "$LOG") failed ($LOG)"
[ "$HAVE_FLAME" = 1 ] || echo "segments/memory/compare skipped: no $VIZ/flamegraph.pl"
[ "$BROWSER" = 1 ] || exit $FAILED

# --- Browser: serve the pages, MemoryViz.js and d3 from local files, no network ---
WEB="$OUT/web"
if [ ! -f "$WEB/node_modules/d3/dist/d3.js" ] || [ ! -d "$WEB/node_modules/playwright-core" ]; then
  (cd "$WEB" && { [ -f package.json ] || npm init -y > /dev/null; } && npm install --no-fund --no-audit d3@7 playwright-core > npm.log 2>&1) \
    || { echo "npm install d3@7 playwright-core failed (see $WEB/npm.log)" >&2; exit 1; }
fi
cp "$VIZ/MemoryViz.js" "$WEB/MemoryViz.js"
[ -f "$VIZ/process_alloc_data.js" ] && cp "$VIZ/process_alloc_data.js" "$WEB/process_alloc_data.js"
# d3's UMD build as an ES module with named exports (what jsdelivr's /+esm serves).
node -e '
const ctx = {};
require("vm").runInNewContext(require("fs").readFileSync(process.argv[1], "utf8"), ctx);
const d3 = ctx.d3;
const names = Object.keys(d3).filter(k => /^[A-Za-z_$][\w$]*$/.test(k));
const src = `import "./d3.umd.js";\nconst d3 = globalThis.d3;\n` +
  names.map(n => `export const ${n} = d3.${n};`).join("\n") + "\n";
require("fs").writeFileSync(process.argv[2], src);
' "$WEB/node_modules/d3/dist/d3.js" "$WEB/d3-esm.js"
cp "$WEB/node_modules/d3/dist/d3.js" "$WEB/d3.umd.js"

cat > "$WEB/check.mjs" <<'JS'
// Loads each page with every CDN request answered from local files; records console
// errors, page errors and failed requests; exercises every view and every trace event.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";
const [chrome, web, out, ...pages] = process.argv.slice(2);
const local = {
  "https://cdn.jsdelivr.net/npm/d3@7/+esm": "d3-esm.js",
  "https://cdn.jsdelivr.net/npm/d3-axis@3/+esm": "d3-esm.js",
  "https://cdn.jsdelivr.net/npm/d3-scale@4/+esm": "d3-esm.js",
  "https://cdn.jsdelivr.net/npm/d3-zoom@3/+esm": "d3-esm.js",
  "https://cdn.jsdelivr.net/npm/d3-brush@3/+esm": "d3-esm.js",
};
function serve(url) {
  if (local[url]) return path.join(web, local[url]);
  const u = new URL(url);
  if (u.hostname === "cdn.jsdelivr.net" && u.pathname.includes("/torch/utils/viz/"))
    return path.join(web, path.basename(u.pathname));
  if (u.hostname === "cdn.jsdelivr.net" && u.pathname.endsWith("/d3.umd.js"))
    return path.join(web, "d3.umd.js");
  if (u.hostname === "viewer.invalid") return decodeURIComponent(u.pathname);
  return null;
}
const browser = await chromium.launch({
  executablePath: chrome,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let bad = 0;
const results = [];
for (const page_path of pages) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const errors = [];
  page.on("console", m => { if (m.type() === "error") errors.push(`console: ${m.text()}`); });
  page.on("pageerror", e => errors.push(`pageerror: ${e.message}`));
  page.on("requestfailed", r => errors.push(`requestfailed: ${r.url()}`));
  await page.route("**/*", route => {
    const file = serve(route.request().url());
    if (file && fs.existsSync(file)) {
      const type = file.endsWith(".html") ? "text/html" : "text/javascript";
      return route.fulfill({ status: 200, contentType: type, body: fs.readFileSync(file) });
    }
    errors.push(`blocked (no local copy): ${route.request().url()}`);
    return route.abort();
  });
  const name = path.basename(page_path, ".html");
  const stats = {};
  try {
    await page.goto("http://viewer.invalid" + encodeURI(path.resolve(page_path)));
    await page.waitForFunction(() => document.querySelectorAll("svg polygon, svg rect").length > 0,
                               null, { timeout: 15000 });
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(out, `${name}.png`) });
    stats.first_view = await page.evaluate(() => document.querySelectorAll("select")[1].value);
    // Every view of the viewer on this snapshot.
    const views = await page.evaluate(() =>
      Array.from(document.querySelectorAll("select")[1].options).map(o => o.text));
    stats.views = {};
    for (const v of views) {
      await page.selectOption("select:nth-of-type(2)", v);
      await page.waitForTimeout(200);
      stats.views[v] = await page.evaluate(() => {
        const divs = Array.from(document.body.children).filter(d => d.tagName === "DIV" && d.style.display === "flex");
        const d = divs.at(-1);
        return d ? { polygons: d.querySelectorAll("polygon").length, rects: d.querySelectorAll("rect").length } : null;
      });
      await page.screenshot({ path: path.join(out, `${name}.${v.replace(/[^A-Za-z]+/g, "_")}.png`) });
    }
    // Allocator State History: select every trace event (redraws the segments at it).
    await page.selectOption("select:nth-of-type(2)", "Allocator State History");
    await page.waitForTimeout(200);
    const n = await page.evaluate(() => {
      const pres = Array.from(document.querySelectorAll("div[style*='flex'] pre"))
        .filter(p => p.parentElement.style.gridRow === "1");
      let ok = 0;
      for (const p of pres) {
        p.dispatchEvent(new MouseEvent("mousedown", { bubbles: true }));
        ok++;
      }
      return ok;
    });
    stats.events_selected = n;
    await page.waitForTimeout(200);
  } catch (e) {
    errors.push(`harness: ${e.message.split("\n")[0]}`);
  }
  if (errors.length) bad++;
  results.push({ page: name, errors, ...stats });
  console.log(`${errors.length ? "FAIL" : "ok  "} ${name} ${JSON.stringify(stats)}`);
  for (const e of errors.slice(0, 10)) console.log(`     ${e}`);
  await page.close();
}
await browser.close();
fs.writeFileSync(path.join(out, "browser.json"), JSON.stringify(results, null, 1));
process.exit(bad ? 1 : 0);
JS

PAGES=()
while IFS= read -r p; do PAGES+=("$p"); done < <(find "$OUT/html" -name '*.html' | sort)
(cd "$WEB" && node check.mjs "$CHROME" "$WEB" "$OUT/shots" "${PAGES[@]}") | tee "$OUT/browser.log"
[ "${PIPESTATUS[0]}" = 0 ] || FAILED=1
echo "browser: $(grep -c '^ok' "$OUT/browser.log") pages ok, $(grep -c '^FAIL' "$OUT/browser.log") failed; screenshots in $OUT/shots"
exit $FAILED
