#!/usr/bin/env python3
"""Checks memreuse snapshot pickles against what PyTorch's memory viewer needs.

Usage: check_snapshot.py [--require-pending] [--last-action ACTION] FILE...

The rules (from torch/cuda/_memory_viz.py and torch/utils/viz/MemoryViz.js):
- the file loads with the standard `pickle` module and uses only the opcodes the browser
  viewer's unpickler implements (no byte strings), with no integer wider than an i64
  (a LONG1 of more than 8 bytes becomes a BigInt in the browser);
- `segments[]` each with int `device`, `address`, `total_size`, `stream` and `blocks`;
  blocks with int `size` and a known `state`, covering the segment exactly in address
  order (the viewer recomputes addresses by summing sizes; `stats` asserts the sum);
- block `frames` and `requested_size` both or neither; frames with `filename`, `name`,
  `line`;
- `device_traces` one list per device (index = device), never empty for a device with
  segments; entries with `action`, `addr`, `size`, `stream`, `device_free` on `oom`,
  optional `time_us`, and no `category` key.
If `torch` is importable, also runs `_memory_viz`'s `segsum`, `trace` and `trace_plot`.
Exit status 0 when every file passes, 1 otherwise.
"""

import pickle
import pickletools
import sys

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# Opcodes the browser viewer's unpickler (MemoryViz.js `unpickle`) implements.
VIEWER_OPCODES = {
    "APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST",
    "FRAME", "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS",
    "SHORT_BINUNICODE", "STOP", "TUPLE2", "APPEND", "NEWFALSE", "BINPUT", "BINUNICODE",
    "EMPTY_TUPLE", "NEWTRUE", "NONE", "BINFLOAT", "TUPLE", "TUPLE1", "TUPLE3",
    "LONG_BINPUT", "LIST", "DICT", "SETITEM",
}
STATES = {"active_allocated", "active_pending_free", "inactive"}
ACTIONS = {
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom",
}


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class Checker:
    def __init__(self, name):
        self.name = name
        self.errors = []

    def err(self, msg):
        if len(self.errors) < 50:
            self.errors.append(msg)

    def opcodes(self, raw):
        for op, arg, pos in pickletools.genops(raw):
            if op.name not in VIEWER_OPCODES:
                self.err(f"opcode {op.name} at {pos} is not read by the browser viewer")
            if op.name == "PROTO" and not 2 <= arg <= 4:
                self.err(f"pickle protocol {arg}: the viewer reads 2 to 4")
            if op.name in ("LONG1", "LONG4") and not I64_MIN <= arg <= I64_MAX:
                self.err(f"integer {arg} at {pos} does not fit in an i64")

    def values(self, v, path):
        if isinstance(v, (bytes, bytearray)):
            self.err(f"{path}: byte string")
        elif is_int(v):
            if not I64_MIN <= v <= I64_MAX:
                self.err(f"{path}: {v} beyond i64")
        elif isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    self.err(f"{path}: non-string key {k!r}")
                self.values(x, f"{path}.{k}")
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                self.values(x, f"{path}[{i}]")

    def ints(self, d, keys, path, optional=False):
        for k in keys:
            if k not in d:
                if not optional:
                    self.err(f"{path}: missing `{k}`")
            elif not is_int(d[k]):
                self.err(f"{path}.{k}: {d[k]!r} is not an int")

    def frames(self, frames, path):
        if not isinstance(frames, list):
            self.err(f"{path}.frames is not a list")
            return
        for i, f in enumerate(frames):
            if not isinstance(f, dict):
                self.err(f"{path}.frames[{i}] is not a dict")
                continue
            for k, t in (("filename", str), ("name", str), ("line", int)):
                if not isinstance(f.get(k), t):
                    self.err(f"{path}.frames[{i}].{k} missing or not {t.__name__}")

    def segment(self, i, seg):
        p = f"segments[{i}]"
        if not isinstance(seg, dict):
            self.err(f"{p} is not a dict")
            return 0
        self.ints(seg, ("device", "address", "total_size", "stream"), p)
        self.ints(seg, ("allocated_size", "active_size", "requested_size"), p, optional=True)
        if "segment_type" in seg and seg["segment_type"] not in ("small", "large"):
            self.err(f"{p}.segment_type {seg['segment_type']!r}")
        if "is_expandable" in seg and not isinstance(seg["is_expandable"], bool):
            self.err(f"{p}.is_expandable is not a bool")
        if "frames" in seg:
            self.frames(seg["frames"], p)
        blocks = seg.get("blocks")
        if not isinstance(blocks, list) or not blocks:
            self.err(f"{p}.blocks missing or empty")
            return 0
        addr = seg.get("address", 0)
        allocated = active = pending = 0
        for j, b in enumerate(blocks):
            bp = f"{p}.blocks[{j}]"
            if not isinstance(b, dict):
                self.err(f"{bp} is not a dict")
                continue
            self.ints(b, ("size",), bp)
            size = b.get("size", 0) if is_int(b.get("size")) else 0
            if size <= 0:
                self.err(f"{bp}.size {size} is not positive")
            if b.get("state") not in STATES:
                self.err(f"{bp}.state {b.get('state')!r}")
            if ("frames" in b) != ("requested_size" in b):
                self.err(f"{bp}: `frames` and `requested_size` must come together")
            if "frames" in b:
                self.frames(b["frames"], bp)
                self.ints(b, ("requested_size",), bp)
            if "address" in b and b["address"] != addr:
                self.err(f"{bp}.address {b['address']} but the blocks before end at {addr}")
            addr += size
            if b.get("state") == "active_allocated":
                allocated += size
            if b.get("state") in ("active_allocated", "active_pending_free"):
                active += size
            if b.get("state") == "active_pending_free":
                pending += 1
        if is_int(seg.get("address")) and is_int(seg.get("total_size")):
            if addr - seg["address"] != seg["total_size"]:
                self.err(f"{p}: blocks cover {addr - seg['address']} of {seg['total_size']} bytes")
        if is_int(seg.get("allocated_size")) and seg["allocated_size"] != allocated:
            self.err(f"{p}.allocated_size {seg['allocated_size']} != {allocated}")
        if is_int(seg.get("active_size")) and seg["active_size"] != active:
            self.err(f"{p}.active_size {seg['active_size']} != {active}")
        return pending

    def traces(self, traces, devices_with_segments):
        if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
            self.err("device_traces is not a list of lists")
            return
        for d in devices_with_segments:
            if d >= len(traces):
                self.err(f"device {d} has segments but no device_traces list")
            elif not traces[d]:
                self.err(f"device {d} has segments but an empty trace")
        for d, trace in enumerate(traces):
            for i, e in enumerate(trace):
                p = f"device_traces[{d}][{i}]"
                if not isinstance(e, dict):
                    self.err(f"{p} is not a dict")
                    continue
                if e.get("action") not in ACTIONS:
                    self.err(f"{p}.action {e.get('action')!r}")
                self.ints(e, ("addr", "size", "stream"), p)
                self.ints(e, ("time_us",), p, optional=True)
                if e.get("action") == "oom":
                    self.ints(e, ("device_free",), p)
                if "category" in e:
                    self.err(f"{p}: `category` key (breaks the viewer's legend)")
                if "frames" in e:
                    self.frames(e["frames"], p)

    def check(self, raw, require_pending, last_action):
        self.opcodes(raw)
        data = pickle.loads(raw)
        self.values(data, "snapshot")
        if not isinstance(data, dict) or "segments" not in data or "device_traces" not in data:
            self.err("top level is not a dict with `segments` and `device_traces`")
            return data, {}
        pending = 0
        for i, seg in enumerate(data["segments"]):
            pending += self.segment(i, seg)
        keys = [(s.get("device"), s.get("address")) for s in data["segments"] if isinstance(s, dict)]
        if keys != sorted(keys):
            self.err("segments are not in (device, address) order")
        devices = {s["device"] for s in data["segments"] if is_int(s.get("device"))}
        self.traces(data["device_traces"], devices)
        if require_pending and pending == 0:
            self.err("no active_pending_free block (expected at least one)")
        if last_action and not any(t and t[-1].get("action") == last_action for t in data["device_traces"]):
            self.err(f"no device trace ends with `{last_action}`")
        blocks = sum(len(s.get("blocks", [])) for s in data["segments"])
        entries = sum(len(t) for t in data["device_traces"])
        return data, {"segments": len(data["segments"]), "blocks": blocks, "pending": pending, "trace_entries": entries}


def with_torch(data, checker):
    try:
        from torch.cuda import _memory_viz as viz
    except Exception:  # noqa: BLE001 - torch is optional
        return "torch not installed: PyTorch's own functions not run"
    try:
        viz.segsum(data)
        viz.trace(data)
        viz.trace_plot(data)
        viz.segment_plot(data)
    except Exception as e:  # noqa: BLE001
        checker.err(f"torch.cuda._memory_viz failed: {e!r}")
    return "torch.cuda._memory_viz segsum/trace/trace_plot/segment_plot ran"


def main(argv):
    require_pending = False
    last_action = None
    files = []
    args = iter(argv)
    for a in args:
        if a == "--require-pending":
            require_pending = True
        elif a == "--last-action":
            last_action = next(args, None)
        else:
            files.append(a)
    if not files:
        print(__doc__)
        return 2
    failed = 0
    for f in files:
        c = Checker(f)
        try:
            with open(f, "rb") as fh:
                raw = fh.read()
            data, summary = c.check(raw, require_pending, last_action)
            note = with_torch(data, c) if not c.errors else ""
        except Exception as e:  # noqa: BLE001 - report, do not crash
            c.err(f"could not load: {e!r}")
            summary, note = {}, ""
        if c.errors:
            failed += 1
            print(f"FAIL {f}")
            for e in c.errors:
                print(f"  {e}")
        else:
            print(f"OK {f} {summary} ({note})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
