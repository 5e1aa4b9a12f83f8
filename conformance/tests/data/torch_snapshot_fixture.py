#!/usr/bin/env python3
"""Writes torch-snapshot-shaped.pickle: a snapshot with the exact structure and Python types
of `torch.cuda.memory._dump_snapshot` (PyTorch 2.x: dicts, tuples, bools, floats, None,
64-bit addresses, cudaStream_t values, frames, allocator_settings), written by Python's own
pickle module at PyTorch's protocol, for the whatif importer tests. Plain Python, no torch.

    python3 conformance/tests/data/torch_snapshot_fixture.py

Story (device 0, trace ring already wrapped when dumped):
  - a 6 MiB block allocated before the ring's first entry is still live (only `segments`
    knows it), and a 512 B block allocated before it is freed inside the ring;
  - a 4 MiB block on the side stream SIDE is freed with stream uses: its free_completed
    comes two entries later;
  - an 8 MiB block is allocated and freed plainly;
  - the recording ran out of memory once (an `oom` entry with device_free).
"""
import pickle
import sys

MIB = 1 << 20
BASE = 0x7F3A_0000_0000
SIDE = 0x55D1_2E3F_4A60  # a cudaStream_t value
FRAMES = [{"filename": "train.py", "line": 42, "name": "forward"},
          {"filename": "torch/nn/modules/linear.py", "line": 125, "name": "forward"}]


def entry(action, addr, size, stream=0, t=0, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": stream,
         "time_us": 1_733_000_000_000_000 + t, "frames": FRAMES,
         "compile_context": "N/A", "user_metadata": ""}
    e.update(extra)
    return e


traces = [
    entry("free_requested", BASE + 0x1000_0000, 512, t=1),   # alloc fell off the ring
    entry("free_completed", BASE + 0x1000_0000, 512, t=1),
    entry("alloc", BASE + 6 * MIB, 4 * MIB, stream=SIDE, t=2),  # 2
    entry("segment_alloc", BASE + 0x2000_0000, 20 * MIB, t=3),
    entry("alloc", BASE + 0x2000_0000, 8 * MIB, t=4),           # 4
    entry("free_requested", BASE + 6 * MIB, 4 * MIB, stream=SIDE, t=5),  # 5: pending
    entry("free_requested", BASE + 0x2000_0000, 8 * MIB, t=6),  # 6: plain free
    entry("free_completed", BASE + 0x2000_0000, 8 * MIB, t=6),
    entry("free_completed", BASE + 6 * MIB, 4 * MIB, stream=SIDE, t=7),  # 8
    entry("oom", 0, 64 * MIB, t=8, device_free=3 * MIB),        # 9
    entry("snapshot", 0, 6 * MIB, t=9),
]
segments = [
    {"device": 0, "address": BASE, "total_size": 20 * MIB, "allocated_size": 6 * MIB,
     "active_size": 6 * MIB, "requested_size": 6 * MIB - 100, "stream": 0,
     "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
     "frames": FRAMES,
     "blocks": [
         {"address": BASE, "size": 6 * MIB, "requested_size": 6 * MIB - 100,
          "state": "active_allocated", "frames": FRAMES},
         {"address": BASE + 6 * MIB, "size": 14 * MIB, "requested_size": 0,
          "state": "inactive", "frames": []},
     ]},
]
snapshot = {
    "segments": segments,
    "device_traces": [traces],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                           "garbage_collection_threshold": 0.0, "expandable_segments": False,
                           "roundup_power2_divisions": {"1": 0}, "last_allocator_settings": None},
    "external_annotations": [],
}
out = sys.argv[1] if len(sys.argv) > 1 else __file__.replace("torch_snapshot_fixture.py", "torch-snapshot-shaped.pickle")
with open(out, "wb") as f:
    pickle.dump(snapshot, f, protocol=pickle.DEFAULT_PROTOCOL)
print(out)
