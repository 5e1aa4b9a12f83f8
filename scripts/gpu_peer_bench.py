#!/usr/bin/env python3
"""PyTorch's CUDA allocators on memreuse-cuda-bench's workloads, and the side-by-side summary.

Modes:
  gpu_peer_bench.py --trace T [--json OUT] [--pairs N] [--expect-backend B]
      Replays the workloads of `memreuse-cuda-bench` with
      torch.cuda.caching_allocator_alloc(size, device, stream) /
      torch.cuda.caching_allocator_delete(ptr): the cached pairs (4 KiB, 2 MiB) and the
      size trace T written by `memreuse-cuda-bench --write-trace T`, cold (after
      torch.cuda.empty_cache()) then warm. The peer is named after the allocator backend
      PyTorch runs: "torch-native", or "torch-cudaMallocAsync" when
      PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync. The same workloads also run through
      torch._C._cuda_cudaCachingAllocator_raw_alloc / raw_delete (the C++ entry points the
      public functions wrap), which skip most of the Python wrapper.
  gpu_peer_bench.py --summarize FILE...   side-by-side table of JSON-line files on stdout
  gpu_peer_bench.py --self-test [--trace T]   checks parsing, replay loops and the
      summary without torch or a GPU (T: a trace written by the Rust trace writer)

Each measurement is one JSON line with the fields of the Rust bench's records. Python loop
overhead is real (tens to hundreds of ns per iteration): every record carries
python_loop_ns_per_op (the same loop without allocator calls) and python_call_ns_per_op
(the same loop calling Python no-op functions of the same arity). Neither is subtracted
from ns_per_op. Without torch or CUDA it prints "skipped: <reason>" and exits 0.
"""

import argparse
import gc
import json
import os
import sys
import tempfile
import time

SCHEMA = "memreuse-gpu-bench/1"
TRACE_MAGIC = "memreuse-trace v1 slots"
FIELDS = (
    "schema", "peer", "api", "workload", "unit", "iterations", "total_ns", "ns_per_op",
    "peak_reserved_bytes", "peak_live_bytes", "trace_live_peak_bytes", "device_allocs",
    "python_loop_ns_per_op", "python_call_ns_per_op", "note",
)
PAIR_SIZES = (4 << 10, 2 << 20)
PUBLIC_API = "torch.cuda.caching_allocator_alloc + caching_allocator_delete"
RAW_API = "torch._C._cuda_cudaCachingAllocator_raw_alloc + raw_delete"


class TraceError(ValueError):
    """A malformed trace file (line number and reason in the message)."""


# ------------------------------------------------------------------------------- trace


def parse_trace(lines):
    """Parses the text format; returns (slots, ops, live_peak_bytes), ops as
    (is_alloc, slot, size) tuples. Enforces the same rules as the Rust reader."""
    it = iter(lines)
    first = next(it, "").rstrip("\n")
    head, _, n = first.rpartition(" ")
    if head != TRACE_MAGIC or not n.isdigit():
        raise TraceError(f"line 1: expected '{TRACE_MAGIC} <N>', found {first!r}")
    slots = int(n)
    live = [None] * slots
    n_live = live_bytes = peak = 0
    ops = []
    for lineno, text in enumerate(it, start=2):
        words = text.split()
        if not words or words[0].startswith("#"):
            continue
        kind = words[0]
        if kind not in ("a", "f") or len(words) != (3 if kind == "a" else 2):
            raise TraceError(f"line {lineno}: expected 'a <slot> <size>' or 'f <slot>': {text!r}")
        if not all(w.isdigit() for w in words[1:]):
            raise TraceError(f"line {lineno}: not a whole number: {text!r}")
        slot = int(words[1])
        if slot >= slots:
            raise TraceError(f"line {lineno}: slot {slot} outside 0..{slots}")
        if kind == "a":
            size = int(words[2])
            if size == 0:
                raise TraceError(f"line {lineno}: allocation of 0 bytes")
            if live[slot] is not None:
                raise TraceError(f"line {lineno}: allocation into live slot {slot}")
            live[slot] = size
            n_live += 1
            live_bytes += size
            peak = max(peak, live_bytes)
            ops.append((True, slot, size))
        else:
            if live[slot] is None:
                raise TraceError(f"line {lineno}: free of empty slot {slot}")
            live_bytes -= live[slot]
            live[slot] = None
            n_live -= 1
            ops.append((False, slot, 0))
    if n_live:
        raise TraceError(f"{n_live} allocation(s) never freed")
    return slots, ops, peak


def read_trace(path):
    with open(path, encoding="ascii") as f:
        return parse_trace(f)


def tiny_trace(seed=7, n=500, slots=16):
    """A small valid trace (an LCG decides; for the self-test only)."""
    state, live, free, ops = seed, [], list(range(slots)), []
    for _ in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        if not live or (free and state >> 63):
            slot = free.pop()
            live.append(slot)
            ops.append((True, slot, 512 + (state >> 40) % (1 << 20)))
        else:
            slot = live.pop((state >> 33) % len(live))
            free.append(slot)
            ops.append((False, slot, 0))
    ops += [(False, s, 0) for s in sorted(live)]
    return slots, ops


def write_trace(path, slots, ops):
    with open(path, "w", encoding="ascii") as f:
        f.write(f"{TRACE_MAGIC} {slots}\n# written by gpu_peer_bench.py\n")
        for is_alloc, slot, size in ops:
            f.write(f"a {slot} {size}\n" if is_alloc else f"f {slot}\n")


# ------------------------------------------------------------------------------- loops
# Written out per arity, so the timed loop is exactly the call and its bookkeeping.


def pairs3(alloc, delete, size, n, dev, stream):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        delete(alloc(size, dev, stream))
    return t0


def pairs2(alloc, delete, size, n, _dev, stream):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        delete(alloc(size, stream))
    return t0


def trace3(alloc, delete, ops, ptrs, dev, stream):
    t0 = time.perf_counter_ns()
    for is_alloc, slot, size in ops:
        if is_alloc:
            ptrs[slot] = alloc(size, dev, stream)
        else:
            delete(ptrs[slot])
    return t0


def trace2(alloc, delete, ops, ptrs, _dev, stream):
    t0 = time.perf_counter_ns()
    for is_alloc, slot, size in ops:
        if is_alloc:
            ptrs[slot] = alloc(size, stream)
        else:
            delete(ptrs[slot])
    return t0


def loop_only_pairs(n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pass
    return time.perf_counter_ns() - t0


def loop_only_trace(ops, slots):
    ptrs = [0] * slots
    t0 = time.perf_counter_ns()
    for is_alloc, slot, size in ops:
        if is_alloc:
            ptrs[slot] = size
        else:
            ptrs[slot]  # noqa: B018 - the same subscript as the real loop
    return time.perf_counter_ns() - t0


def noop3(_size, _dev, _stream):
    return 1


def noop2(_size, _stream):
    return 1


def noop1(_ptr):
    return None


def timed(loop, alloc, delete, work, n_or_ptrs, dev, stream, sync):
    """Runs one timed loop with the garbage collector off; ns including `sync()`."""
    gc.collect()
    gc.disable()
    try:
        t0 = loop(alloc, delete, work, n_or_ptrs, dev, stream)
        sync()
        return time.perf_counter_ns() - t0
    finally:
        gc.enable()


def make_record(peer, api, workload, unit, iterations, total_ns, **extra):
    r = {k: None for k in FIELDS}
    r.update(schema=SCHEMA, peer=peer, api=api, workload=workload, unit=unit,
             iterations=iterations, total_ns=total_ns,
             ns_per_op=total_ns / max(iterations, 1))
    r.update(extra)
    return r


class Memory:
    """Peak figures around a measurement (torch, or the self-test's fake)."""

    def __init__(self, torch=None, device=0, counts_device_allocs=True):
        # PyTorch's cudaMallocAsync backend fills only the byte figures of memory_stats:
        # its num_device_alloc would read 0, so report "unknown" (None) instead.
        self.torch, self.device, self.allocs0 = torch, device, None
        self.counts_device_allocs = counts_device_allocs

    def reset(self, cold):
        t = self.torch
        if t is None:
            return
        t.cuda.synchronize(self.device)
        if cold:
            t.cuda.empty_cache()
        t.cuda.reset_peak_memory_stats(self.device)
        self.allocs0 = t.cuda.memory_stats(self.device).get("num_device_alloc")

    def figures(self):
        t = self.torch
        if t is None:
            return {}
        allocs = t.cuda.memory_stats(self.device).get("num_device_alloc")
        if not self.counts_device_allocs:
            allocs = None
        return {
            "peak_reserved_bytes": t.cuda.max_memory_reserved(self.device),
            "peak_live_bytes": t.cuda.max_memory_allocated(self.device),
            "device_allocs": None if allocs is None or self.allocs0 is None
            else allocs - self.allocs0,
        }


def run_workloads(peer, apis, trace, pairs, warmup, memory, sync, dev=0, stream=0,
                  emit=None):
    """All workloads for every (api name, alloc, delete, arity); returns records and hands
    each to `emit` as soon as it is measured (so a timeout loses only the rest)."""
    slots, ops, live_peak = trace
    records = []

    def add(record):
        records.append(record)
        if emit:
            emit(record)

    loop_pairs = loop_only_pairs(pairs) / pairs
    loop_trace = loop_only_trace(ops, slots) / max(len(ops), 1)
    for api, alloc, delete, arity in apis:
        pair_loop, trace_loop = (pairs3, trace3) if arity == 3 else (pairs2, trace2)
        noop = noop3 if arity == 3 else noop2
        call_pairs = timed(pair_loop, noop, noop1, 512, pairs, dev, stream, lambda: None)
        call_trace = timed(trace_loop, noop, noop1, ops, [0] * slots, dev, stream,
                           lambda: None)
        for size in PAIR_SIZES:
            timed(pair_loop, alloc, delete, size, warmup, dev, stream, sync)
            memory.reset(cold=False)
            ns = timed(pair_loop, alloc, delete, size, pairs, dev, stream, sync)
            name = f"pair_{size >> 20}MiB" if size >= 1 << 20 else f"pair_{size >> 10}KiB"
            add(make_record(
                peer, api, name, "pair", pairs, ns, **memory.figures(),
                python_loop_ns_per_op=loop_pairs, python_call_ns_per_op=call_pairs / pairs))
        for workload, cold in (("trace_cold", True), ("trace", False)):
            memory.reset(cold=cold)
            ns = timed(trace_loop, alloc, delete, ops, [0] * slots, dev, stream, sync)
            add(make_record(
                peer, api, workload, "op", len(ops), ns, **memory.figures(),
                trace_live_peak_bytes=live_peak, python_loop_ns_per_op=loop_trace,
                python_call_ns_per_op=call_trace / max(len(ops), 1)))
    return records


# ------------------------------------------------------------------------------- torch


def skip(reason, args, peer="torch"):
    print(f"skipped: {reason}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(json.dumps({"schema": SCHEMA, "peer": peer, "skipped": reason}) + "\n")
    return 0


def run_torch(args):
    try:
        trace = read_trace(args.trace)
    except (OSError, TraceError) as e:
        print(f"gpu_peer_bench: trace {args.trace}: {e}", file=sys.stderr)
        return 1
    want = args.expect_backend
    peer = f"torch-{want}" if want else "torch"
    try:
        import torch
    except ImportError as e:
        return skip(f"PyTorch is not importable ({e})", args, peer)
    if not torch.cuda.is_available():
        return skip(f"torch {torch.__version__}: no CUDA device", args, peer)
    dev = 0
    torch.cuda.set_device(dev)
    torch.zeros(1, device="cuda")  # creates the context outside every timed region
    backend = torch.cuda.get_allocator_backend()
    if want and backend != want:
        print(f"gpu_peer_bench: expected allocator backend {want}, PyTorch runs {backend} "
              f"(PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')!r})",
              file=sys.stderr)
        return 1
    peer = f"torch-{backend}"
    stream = torch.cuda.current_stream(dev).cuda_stream
    apis = [(PUBLIC_API, torch.cuda.caching_allocator_alloc,
             torch.cuda.caching_allocator_delete, 3)]
    raw_alloc = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", None)
    raw_delete = getattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", None)
    if raw_alloc and raw_delete:
        apis.append((RAW_API, raw_alloc, raw_delete, 2))
    print(f"{peer}: torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(dev)}", file=sys.stderr)
    out = open(args.json, "w", encoding="utf-8") if args.json else None

    def emit(r):
        line = json.dumps(r)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
        print(f"{r['peer']:>22} {r['workload']:<10} {r['ns_per_op']:>10.1f} ns/{r['unit']} "
              f"({'_C' if r['api'] == RAW_API else 'public'})", file=sys.stderr)

    try:
        run_workloads(peer, apis, trace, args.pairs, args.warmup,
                      Memory(torch, dev, counts_device_allocs=backend != "cudaMallocAsync"),
                      lambda: torch.cuda.synchronize(dev), dev, stream, emit=emit)
    finally:
        if out:
            out.close()
    return 0


# ------------------------------------------------------------------------------- summary

PEERS = ("memreuse", "raw-cuMemAlloc", "torch-native", "torch-cudaMallocAsync")
WORKLOADS = ("pair_4KiB", "pair_2MiB", "trace_cold", "trace")


def load_records(paths):
    records, skipped, problems = [], [], []
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                for n, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    try:
                        r = json.loads(line)
                    except ValueError:
                        problems.append(f"{p}:{n}: not JSON")
                        continue
                    (skipped if "skipped" in r else records).append(r)
        except OSError as e:
            problems.append(f"{p}: {e.strerror}")
    return records, skipped, problems


def table(title, rows, header):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    out = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return [line.rstrip() for line in out]


def cell(value, base, fmt):
    if value is None:
        return "-"
    text = fmt(value)
    if base:
        text += f" ({value / base:.2f}x)"
    return text


def summarize(paths):
    records, skipped, problems = load_records(paths)

    def pick(peer, workload, raw_api=False):
        for r in records:
            if r["peer"] == peer and r["workload"] == workload and \
                    (r.get("api") == RAW_API) == raw_api:
                return r
        return None

    lines = []
    for key, title, fmt in (
            ("ns_per_op", "ns per iteration (pair = malloc+free; op = one trace line); "
             "(x) = peer / memreuse, lower is better", lambda v: f"{v:.1f}"),
            ("peak_reserved_bytes", "peak reserved MiB during the loop; (x) = peer / memreuse",
             lambda v: f"{v / 2**20:.1f}")):
        rows = []
        for w in WORKLOADS:
            base = pick("memreuse", w)
            base_v = base.get(key) if base else None
            row = [w]
            for p in PEERS:
                r = pick(p, w)
                # The raw driver replays only a cold prefix of the trace: its trace figures
                # are shown, but a ratio against memreuse's whole trace would mislead.
                partial = p == "raw-cuMemAlloc" and w.startswith("trace")
                row.append(cell(r.get(key) if r else None,
                                None if p == "memreuse" or partial else base_v, fmt)
                           + (" (prefix)" if partial and r else ""))
            for p in PEERS[2:]:
                r = pick(p, w, raw_api=True)
                row.append(cell(r.get(key) if r else None, base_v, fmt))
            rows.append(row)
        header = ["workload", *PEERS, *(p + " (_C)" for p in PEERS[2:])]
        keep = [i for i in range(len(header)) if i == 0 or any(r[i] != "-" for r in rows)]
        if len(keep) > 1:
            lines += table(f"== {title}", [[r[i] for i in keep] for r in rows],
                           [header[i] for i in keep]) + [""]
    overhead = []
    for p in PEERS[2:]:
        for raw_api in (False, True):
            for w in WORKLOADS:
                r = pick(p, w, raw_api)
                if r and r.get("python_loop_ns_per_op") is not None:
                    overhead.append([p, "_C" if raw_api else "public", w,
                                     f"{r['python_loop_ns_per_op']:.1f}",
                                     f"{r.get('python_call_ns_per_op') or 0:.1f}"])
    if overhead:
        lines += table("== Python overhead per iteration, INCLUDED in the torch figures above",
                       overhead, ["peer", "api", "workload", "loop only ns",
                                  "loop + no-op calls ns"])
        lines += ["   torch's own cost is roughly ns_per_op minus one of these; the public API "
                  "is itself a Python", "   function (device guard, stream lookup), which the "
                  "(_C) columns mostly avoid.", ""]
    notes = sorted({r["note"] for r in records if r.get("note")})
    lines += [f"note: {n}" for n in notes]
    lines += [f"skipped {s.get('peer')}: {s['skipped']}" for s in skipped]
    lines += [f"problem: {p}" for p in problems]
    if not records:
        lines.append("no benchmark results (every peer skipped or failed)")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------- self-test


class FakeAllocator:
    """Hands out integers; checks each delete frees a live pointer exactly once."""

    def __init__(self):
        self.next, self.live, self.calls = 1 << 32, set(), 0

    def alloc3(self, size, _dev, _stream):
        return self.alloc2(size, _stream)

    def alloc2(self, size, _stream):
        assert size > 0
        self.next += size
        self.live.add(self.next)
        self.calls += 1
        return self.next

    def delete(self, ptr):
        self.live.remove(ptr)


def self_test(args):
    checked = []
    if args.trace:
        slots, ops, peak = read_trace(args.trace)
        assert ops and slots > 0 and peak > 0, "the given trace is empty"
        checked.append(f"{args.trace}: {len(ops)} ops, {slots} slots, live peak {peak} B")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.txt")
        slots, ops = tiny_trace()
        write_trace(path, slots, ops)
        back = read_trace(path)
        assert back[:2] == (slots, ops), "round trip"
        for bad in ("nope\n", f"{TRACE_MAGIC} 2\nx 0\n", f"{TRACE_MAGIC} 2\na 0 5\n",
                    f"{TRACE_MAGIC} 2\na 2 5\n", f"{TRACE_MAGIC} 2\nf 0\n",
                    f"{TRACE_MAGIC} 2\na 0 0\n", f"{TRACE_MAGIC} 2\na 0 -5\n",
                    f"{TRACE_MAGIC} 2\na 0 5\na 0 5\nf 0\n", f"{TRACE_MAGIC} 2\nf 0 1\n"):
            try:
                parse_trace(bad.splitlines(True))
            except TraceError:
                continue
            raise AssertionError(f"accepted malformed trace {bad!r}")
        fake = FakeAllocator()
        apis = [(PUBLIC_API, fake.alloc3, fake.delete, 3),
                (RAW_API, fake.alloc2, fake.delete, 2)]
        records = run_workloads("torch-native", apis, back, 100, 10, Memory(), lambda: None)
        assert not fake.live, "every fake allocation was freed"
        assert len(records) == 8 and all(set(r) == set(FIELDS) for r in records)
        checked.append(f"replayed {len(ops)} ops and the pairs with a fake allocator")
        files = []
        for i, (peer, scale) in enumerate((("memreuse", 1.0), ("torch-cudaMallocAsync", 3.0))):
            f = os.path.join(d, f"{i}.jsonl")
            with open(f, "w", encoding="utf-8") as out:
                for r in records[:4]:
                    out.write(json.dumps(dict(r, peer=peer, ns_per_op=r["ns_per_op"] * scale + 1,
                                              peak_reserved_bytes=2 << 20)) + "\n")
            files.append(f)
        with open(os.path.join(d, "s.jsonl"), "w", encoding="utf-8") as out:
            out.write(json.dumps({"schema": SCHEMA, "peer": "raw-cuMemAlloc",
                                  "skipped": "no driver"}) + "\n")
        text = summarize(files + [os.path.join(d, "s.jsonl"), os.path.join(d, "missing")])
        for want in ("pair_4KiB", "torch-cudaMallocAsync", "x)", "skipped raw-cuMemAlloc",
                     "problem:", "2.0", "Python overhead"):
            assert want in text, f"summary lacks {want!r}:\n{text}"
        assert "no benchmark results" in summarize([os.path.join(d, "s.jsonl")])
    for c in checked:
        print(f"self-test: {c}")
    print("self-test: ok")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--self-test", action="store_true")
    mode.add_argument("--summarize", nargs="+", metavar="FILE")
    ap.add_argument("--trace", help="trace file written by memreuse-cuda-bench --write-trace")
    ap.add_argument("--json", help="also write the JSON lines here")
    ap.add_argument("--pairs", type=int, default=200_000, help="timed pairs per size")
    ap.add_argument("--warmup", type=int, default=1000, help="untimed pairs before each")
    ap.add_argument("--expect-backend", choices=("native", "cudaMallocAsync"),
                    help="fail unless PyTorch runs this allocator backend")
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.warmup < 0:
        ap.error("--pairs must be at least 1 and --warmup at least 0")
    if args.self_test:
        return self_test(args)
    if args.summarize:
        sys.stdout.write(summarize(args.summarize))
        return 0
    if not args.trace:
        ap.error("--trace is required (or --self-test / --summarize)")
    return run_torch(args)


if __name__ == "__main__":
    sys.exit(main())
