#!/usr/bin/env python3
"""torch_matmul: torch.matmul in bf16 on GPT-2's GEMMs, the cuBLASLt baseline.

The same GEMMs as bench/gemm_cublaslt.cpp (loom-bench-gemm-cublaslt), in the
same row-major terms and the same table

    gemm | M | N | K | ms | TFLOP/s

so scripts/gpu-check can put the two side by side: for each linear layer
(qkv, attn_proj, fc, fc_proj, the tied lm_head) the forward Y = X W (fwd),
dX = dY W^T (dx) and dW = X^T dY (dw), bf16 in and out (torch accumulates
bf16 matmuls in fp32); for the four linears with a bias also dW with the bias
gradient dY.sum(0) after it (dw+bias: autograd's two kernels, against Loom's
one GEMM with the sums in its epilogue; TFLOP/s count the product only, and
the 'all' line leaves these rows out). Transposed operands are transposed views, as autograd
passes them. Median of --iters timed calls after --warmup (CUDA events on a
GPU; wall clock on --device cpu, which exists to test this script).

  torch_matmul.py [--batch 16] [--seq 1024] [--C 768] [--V 50257] [--Vp 0]
                  [--iters 20] [--warmup 5] [--device auto|cuda|cpu] [--json F]
"""
import argparse
import json
import sys
import time

import torch

PROG = "torch_matmul"


def gpt2_shapes(rows, C, V, Vp=0):
    """(name, M, N, K, transA, transB, bias_grad) exactly as gemm_cublaslt.cpp
    lists them (lm_head_p: the LM head on the padded vocabulary Vp, when
    Vp > 0; bias_grad: B's column sums too, the dw+bias rows)."""
    shapes = []
    for name, n_in, n_out in (("qkv", C, 3 * C), ("attn_proj", C, C),
                              ("fc", C, 4 * C), ("fc_proj", 4 * C, C)):
        shapes.append((name + ".fwd", rows, n_out, n_in, False, False, False))
        shapes.append((name + ".dx", rows, n_in, n_out, False, True, False))
        shapes.append((name + ".dw", n_in, n_out, rows, True, False, False))
        shapes.append((name + ".dw+bias", n_in, n_out, rows, True, False, True))
    for name, v in (("lm_head", V), ("lm_head_p", Vp)):
        if v > 0:
            shapes.append((name + ".fwd", rows, v, C, False, True, False))
            shapes.append((name + ".dx", rows, C, v, False, False, False))
            shapes.append((name + ".dw", v, C, rows, True, False, False))
    return shapes


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--C", type=int, default=768)
    ap.add_argument("--V", type=int, default=50257)
    ap.add_argument("--Vp", type=int, default=0,
                    help="also the LM head on this padded vocabulary")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--json")
    args = ap.parse_args()
    if min(args.batch, args.seq, args.C, args.V, args.iters) < 1 or args.warmup < 0:
        print(f"{PROG}: error: sizes and --iters must be >= 1", file=sys.stderr)
        sys.exit(2)
    if args.Vp < 0:
        print(f"{PROG}: error: --Vp must be >= 0 (0: no padded LM head)",
              file=sys.stderr)
        sys.exit(2)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"{PROG}: error: --device cuda: torch.cuda.is_available() is False;"
              f" use --device cpu", file=sys.stderr)
        sys.exit(2)
    device = torch.device("cuda" if args.device == "cuda" or (
        args.device == "auto" and torch.cuda.is_available()) else "cpu")
    on_gpu = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if on_gpu else "cpu"
    print(f"torch.matmul bf16 GEMMs (torch {torch.__version__}) of GPT-2 "
          f"C={args.C} V={args.V} at B={args.batch} T={args.seq} on {name}")
    print(f"{'gemm':<17} {'M':>7} {'N':>7} {'K':>7} {'ms':>9} {'TFLOP/s':>9}")
    torch.manual_seed(1)
    rows, total_ms, total_flops = [], 0.0, 0.0
    for gemm, M, N, K, ta, tb, bias_grad in gpt2_shapes(
            args.batch * args.seq, args.C, args.V, args.Vp):
        # Stored as gemm.h's contract says (A [K,M] when transposed, ...).
        a = torch.empty((K, M) if ta else (M, K), device=device,
                        dtype=torch.bfloat16).uniform_(-1, 1)
        b = torch.empty((N, K) if tb else (K, N), device=device,
                        dtype=torch.bfloat16).uniform_(-1, 1)
        A, B = (a.t() if ta else a), (b.t() if tb else b)
        out = torch.empty((M, N), device=device, dtype=torch.bfloat16)
        bias = torch.empty((N,), device=device, dtype=torch.bfloat16)

        def run():
            torch.matmul(A, B, out=out)
            if bias_grad:
                torch.sum(B, dim=0, out=bias)

        for _ in range(args.warmup):
            run()
        times = []
        for _ in range(args.iters):
            if on_gpu:
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop))
            else:
                t0 = time.perf_counter()
                run()
                times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        ms = times[len(times) // 2]
        flops = 2.0 * M * N * K
        tflops = flops / (ms * 1e-3) / 1e12
        if not bias_grad:  # the step's GEMMs once each
            total_ms += ms
            total_flops += flops
        print(f"{gemm:<17} {M:>7} {N:>7} {K:>7} {ms:>9.4f} {tflops:>9.1f}")
        rows.append({"gemm": gemm, "M": M, "N": N, "K": K, "ms": ms,
                     "tflops": tflops})
        del a, b, A, B, out, bias
    print(f"{'all':<17} {'':>7} {'':>7} {'':>7} {total_ms:>9.4f} "
          f"{total_flops / (total_ms * 1e-3) / 1e12:>9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)
            f.write("\n")


if __name__ == "__main__":
    main()
