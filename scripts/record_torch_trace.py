#!/usr/bin/env python3
"""Records a real model's allocation history as a memreuse.trace/1 file (docs/trace-format.md).

    pip install torch            # CPU is enough; no GPU, no network at run time
    python3 scripts/record_torch_trace.py --model gpt2-small --out traces/gpt2-small.trace.gz
    python3 scripts/record_torch_trace.py --model llama --out traces/llama-decoder.trace.gz

What it records: the model is built from a config with random weights (no download), then
trained for --steps steps of AdamW on random tokens, all inside torch.profiler with
profile_memory=True. Every storage allocation and free that the profiler saw (its
allocation events: pointer, signed byte count, time) is paired by pointer, in time order,
and written as one `alloc` / `free` line with a fresh id, the requested bytes, stream 0 and
the time in microseconds since the first event. Building the model inside the profiler means
the weights, gradients and optimizer state are in the history too, so its live peak is the
job's. Frees of memory allocated before the profiler started (none are expected) are
counted in the header and left out; allocations still live at the end stay live.

The requests are those of the CPU run: a GPU run of the same model asks for the same
tensors, but also for cuBLAS/cuDNN workspaces and may pick other kernels with other
temporaries. The history is what the program asked for, not what an allocator did, so
replaying it under any allocator setting is meaningful (memreuse-conformance whatif).

Models (configs below; both use tied or untied embeddings as their families do):
  gpt2-small  GPT-2 small: 12 layers, d_model 768, 12 heads, vocab 50257, LayerNorm, GELU MLP,
              fused QKV projection, tied embeddings (124 M parameters)
  llama       Llama-style decoder: 12 layers, d_model 768, 12 query heads / 4 key-value heads
              (grouped-query attention), rotary embeddings, RMSNorm, SwiGLU MLP (hidden
              2048), vocab 32000, untied output head (124.7 M parameters)
"""

import argparse
import gzip
import io
import sys

FORMAT = "memreuse.trace/1"

CONFIGS = {
    "gpt2-small": dict(family="gpt2", n_layer=12, d_model=768, n_head=12, vocab=50257, max_seq=1024),
    "llama": dict(family="llama", n_layer=12, d_model=768, n_head=12, n_kv_head=4, hidden=2048,
                  vocab=32000, max_seq=2048),
}


def build_model(torch, cfg):
    """A decoder-only transformer from `cfg`, random weights."""
    nn = torch.nn
    F = torch.nn.functional

    class GPT2Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc = nn.Linear(d, 4 * d)
            self.out = nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (y.view(b, t, self.h, d // self.h).transpose(1, 2) for y in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.wte = nn.Embedding(c["vocab"], c["d_model"])
            self.wpe = nn.Embedding(c["max_seq"], c["d_model"])
            self.blocks = nn.ModuleList(GPT2Block(c["d_model"], c["n_head"]) for _ in range(c["n_layer"]))
            self.ln_f = nn.LayerNorm(c["d_model"])

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.t()  # tied embeddings

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotary(x, cos, sin):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    class LlamaBlock(nn.Module):
        def __init__(self, d, h, kv, hidden):
            super().__init__()
            self.h, self.kv, self.hd = h, kv, d // h
            self.norm1 = RMSNorm(d)
            self.wq = nn.Linear(d, h * self.hd, bias=False)
            self.wk = nn.Linear(d, kv * self.hd, bias=False)
            self.wv = nn.Linear(d, kv * self.hd, bias=False)
            self.wo = nn.Linear(h * self.hd, d, bias=False)
            self.norm2 = RMSNorm(d)
            self.w1 = nn.Linear(d, hidden, bias=False)
            self.w3 = nn.Linear(d, hidden, bias=False)
            self.w2 = nn.Linear(hidden, d, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            y = self.norm1(x)
            q = self.wq(y).view(b, t, self.h, self.hd).transpose(1, 2)
            k = self.wk(y).view(b, t, self.kv, self.hd).transpose(1, 2)
            v = self.wv(y).view(b, t, self.kv, self.hd).transpose(1, 2)
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
            rep = self.h // self.kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.wo(a.transpose(1, 2).reshape(b, t, -1))
            y = self.norm2(x)
            return x + self.w2(F.silu(self.w1(y)) * self.w3(y))

    class Llama(nn.Module):
        def __init__(self, c):
            super().__init__()
            d = c["d_model"]
            self.hd = d // c["n_head"]
            self.tok = nn.Embedding(c["vocab"], d)
            self.blocks = nn.ModuleList(
                LlamaBlock(d, c["n_head"], c["n_kv_head"], c["hidden"]) for _ in range(c["n_layer"]))
            self.norm = RMSNorm(d)
            self.head = nn.Linear(d, c["vocab"], bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd))
            freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv)
            cos, sin = freqs.cos(), freqs.sin()
            x = self.tok(idx)
            for blk in self.blocks:
                x = blk(x, cos, sin)
            return self.head(self.norm(x))

    model = GPT2(cfg) if cfg["family"] == "gpt2" else Llama(cfg)
    # GPT-2's initialisation (normal, std 0.02; zero biases), so the loss starts near
    # ln(vocab) as a real run's does.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                m.bias.zero_()
    return model


def allocation_events(prof):
    """(time_ns, ptr, signed bytes) of every allocation event, in time order."""
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        ev = stack.pop()
        stack.extend(ev.children)
        if str(ev.tag) == "_EventType.Allocation":
            x = ev.extra_fields
            if x.alloc_size != 0:
                events.append((ev.start_time_ns, x.ptr, x.alloc_size))
    # At one timestamp a free comes first: a pointer freed and handed out again in the same
    # nanosecond must be freed before it can be allocated.
    events.sort(key=lambda e: (e[0], e[2] > 0))
    return events


def to_history(events):
    """Pairs events by pointer: [(kind, id, size, time_us)], and the frees left out."""
    lines, live, next_id, unknown_frees, missed_frees = [], {}, 1, 0, 0
    t0 = events[0][0] if events else 0
    for t_ns, ptr, nbytes in events:
        t_us = (t_ns - t0) // 1000
        if nbytes > 0:
            if ptr in live:  # the profiler missed a free: close the old allocation first
                old_id, old_size = live.pop(ptr)
                missed_frees += 1
                lines.append(("free", old_id, old_size, t_us))
            live[ptr] = (next_id, nbytes)
            lines.append(("alloc", next_id, nbytes, t_us))
            next_id += 1
        else:
            entry = live.pop(ptr, None)
            if entry is None:
                unknown_frees += 1
                continue
            if entry[1] != -nbytes:
                raise SystemExit(f"free of {-nbytes} B at {ptr:#x} does not match its alloc of {entry[1]} B")
            lines.append(("free", entry[0], entry[1], t_us))
    return lines, unknown_frees, missed_frees, len(live)


def write_trace(path, comments, lines):
    buf = io.StringIO()
    buf.write(FORMAT + "\n")
    for c in comments:
        buf.write(f"# {c}\n")
    for kind, ident, size, t_us in lines:
        buf.write(f"{kind} {ident} {size} 0 {t_us}\n")
    buf.write(f"end {len(lines)}\n")
    data = buf.getvalue().encode()
    if path.endswith(".gz"):
        # mtime=0 and no file name: the same history gives the same bytes.
        with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
            gz.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--out", required=True, help="output path (.gz: gzip-compressed)")
    ap.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    ap.add_argument("--batch", type=int, default=4, help="sequences per step (default 4)")
    ap.add_argument("--seq", type=int, default=512, help="tokens per sequence (default 512)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    args = ap.parse_args()
    if args.steps < 1 or args.batch < 1 or args.seq < 2:
        ap.error("--steps and --batch must be >= 1 and --seq >= 2")

    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        sys.exit("torch is not installed: pip install torch")

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    cfg = CONFIGS[args.model]
    if args.seq > cfg["max_seq"]:
        ap.error(f"--seq must be at most {cfg['max_seq']} for {args.model}")
    tokens = torch.randint(0, cfg["vocab"], (args.steps, args.batch, args.seq + 1))

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model = build_model(torch, cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        for step in range(args.steps):
            x, y = tokens[step, :, :-1], tokens[step, :, 1:]
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            print(f"step {step}: loss {loss.item():.4f}", file=sys.stderr)
            del logits, loss
    params = sum(p.numel() for p in model.parameters())

    lines, unknown_frees, missed_frees, live_at_end = to_history(allocation_events(prof))
    live = peak = 0
    for kind, _, size, _ in lines:
        live += size if kind == "alloc" else -size
        peak = max(peak, live)
    cfg_text = " ".join(f"{k}={v}" for k, v in cfg.items())
    comments = [
        f"source: scripts/record_torch_trace.py --model {args.model} --steps {args.steps} "
        f"--batch {args.batch} --seq {args.seq} --seed {args.seed}",
        f"model: {args.model} ({cfg_text}), {params} parameters, random weights, AdamW",
        f"recorded: torch {torch.__version__} on CPU, torch.profiler allocation events, stream 0",
        f"events: {len(lines)}, frees of unknown memory left out: {unknown_frees}, "
        f"frees the profiler missed (added before the pointer's next alloc): {missed_frees}, "
        f"allocations live at end: {live_at_end}, live peak: {peak} bytes",
    ]
    write_trace(args.out, comments, lines)
    print(f"{args.out}: {len(lines)} events, live peak {peak / 2**20:.1f} MiB, "
          f"{live_at_end} live at end, {unknown_frees} unknown frees", file=sys.stderr)


if __name__ == "__main__":
    main()
