#!/usr/bin/env python3
"""torch_attention: PyTorch's causal attention on one GPT-2 layer, the baseline
for Loom's flash kernels.

Times what torch_gpt2.py's model runs: F.scaled_dot_product_attention with
is_causal=True (FlashAttention-2 in bf16 on an H100/H200), or, where torch has
no SDPA (Debian's 1.13), the masked softmax it falls back to; forward (with
autograd recording, as in training) and the gradient of q, k and v given dy,
on q, k, v viewed out of one packed qkv [B, T, 3C] as the model views them.
Median of --iters (CUDA events on a GPU; wall clock on --device cpu, which
exists to test this script). Prints loom-bench-attention-cuda's table

    kernel | forward ms | grad ms

and with --json F writes [{"kernel": "torch-sdpa" | "torch-masked-softmax",
"forward_ms", "grad_ms", "dtype"}] for bench/perf_report.py.

  torch_attention.py [--batch 16] [--seq 1024] [--C 768] [--heads 12]
                     [--dtype bf16|fp32] [--iters 10] [--warmup 3]
                     [--device auto|cuda|cpu] [--json F]
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

PROG = "torch_attention"


def causal_attention(q, k, v):
    """SDPA where torch has it, else the masked softmax of torch_gpt2.py."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return att @ v


def timed(fn, iters, warmup, on_gpu):
    """Median milliseconds of fn() over iters calls after warmup calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if on_gpu:
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--json")
    args = ap.parse_args()
    if min(args.batch, args.seq, args.C, args.heads, args.iters) < 1 or \
            args.warmup < 0:
        print(f"{PROG}: error: sizes and --iters must be >= 1", file=sys.stderr)
        sys.exit(2)
    if args.C % args.heads:
        print(f"{PROG}: error: --C {args.C} is not a multiple of --heads "
              f"{args.heads}", file=sys.stderr)
        sys.exit(2)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"{PROG}: error: --device cuda: torch.cuda.is_available() is "
              f"False; use --device cpu", file=sys.stderr)
        sys.exit(2)
    device = torch.device("cuda" if args.device == "cuda" or (
        args.device == "auto" and torch.cuda.is_available()) else "cpu")
    on_gpu = device.type == "cuda"
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    B, T, C, NH = args.batch, args.seq, args.C, args.heads
    kernel = ("torch-sdpa" if hasattr(F, "scaled_dot_product_attention")
              else "torch-masked-softmax")
    name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    print(f"{kernel} {args.dtype} causal attention (torch {torch.__version__}) "
          f"B={B} T={T} C={C} NH={NH} on {name}")

    torch.manual_seed(1)
    qkv = torch.empty(B, T, 3 * C, device=device, dtype=dtype).uniform_(-1, 1)
    # Leaves viewed out of the packed qkv as the model views them, so the
    # gradient timed is attention's own (not the copy back into qkv).
    q, k, v = (x.view(B, T, NH, C // NH).transpose(1, 2).detach()
               .requires_grad_() for x in qkv.split(C, dim=2))
    dy = torch.empty(B, NH, T, C // NH, device=device,
                     dtype=dtype).uniform_(-1, 1)

    forward_ms = timed(lambda: causal_attention(q, k, v), args.iters,
                       args.warmup, on_gpu)
    y = causal_attention(q, k, v)
    grad_ms = timed(lambda: torch.autograd.grad(y, (q, k, v), dy,
                                                retain_graph=True),
                    args.iters, args.warmup, on_gpu)
    print(f"{'kernel':<22} {'forward ms':>11} {'grad ms':>9}")
    print(f"{kernel:<22} {forward_ms:>11.3f} {grad_ms:>9.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"kernel": kernel, "forward_ms": forward_ms,
                        "grad_ms": grad_ms, "dtype": args.dtype}], f)
            f.write("\n")


if __name__ == "__main__":
    main()
