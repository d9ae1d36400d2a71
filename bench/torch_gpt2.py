#!/usr/bin/env python3
"""torch_gpt2: PyTorch GPT-2 training throughput, the baseline Loom is measured against.

The model Loom compiles from an HF GPT-2 config.json (pre-norm blocks,
tanh-GELU MLP of width 4C, LM head tied to wte, no dropout), trained the way
PyTorch users train it on one GPU: bf16 autocast, causal
F.scaled_dot_product_attention, fused AdamW, gradient clipping at 1.0.
Prints one line per timed step, then tokens/s and MFU with llm.c's FLOP
convention

    flops per token = 6 N + 6 L C T     (N parameters, tied wte counted once)
    MFU = flops per token x tokens/s / peak     (peak 989 TFLOP/s: H100/H200
                                                 dense bf16)

and, with --json F, the same figures for scripts (scripts/gpu-check).

Older PyTorch (Debian's 1.13 on the CPU build machine) lacks SDPA and fused
AdamW: the script falls back to an explicit masked softmax and to the
foreach / for-loop AdamW and prints a "fallback:" line for each, so the
script itself is tested on CPU at a tiny size (test/e2e/bench-torch-gpt2.test).

  torch_gpt2.py [--config CFG.json] [--batch 16] [--seq T] [--steps 10]
                [--warmup 2] [--device auto|cuda|cpu] [--dtype bf16|fp32]
                [--data TOKENS.bin] [--peak-tflops 989] [--compile] [--json F]
"""
import argparse
import inspect
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PROG = "torch_gpt2"

# GPT-2 124M (HF gpt2's config.json), the default model.
GPT2_124M = {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257,
             "n_positions": 1024, "layer_norm_epsilon": 1e-5}


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load_config(path):
    if path is None:
        return dict(GPT2_124M)
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read the model config {path}: {e}")
    missing = [k for k in ("n_layer", "n_head", "n_embd", "vocab_size",
                           "n_positions") if k not in cfg]
    if missing:
        fail(f"{path} is not an HF GPT-2 config.json: missing "
             f"{', '.join(missing)}")
    if cfg["n_embd"] % cfg["n_head"]:
        fail(f"{path}: n_embd {cfg['n_embd']} is not divisible by n_head "
             f"{cfg['n_head']}")
    cfg.setdefault("layer_norm_epsilon", 1e-5)
    return cfg


HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.NH = NH
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        if not HAVE_SDPA:
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, T, T), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2)
                   for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, NH, T, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.attn = CausalSelfAttention(C, NH, T)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(self.gelu(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        C, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
        self.wte = nn.Embedding(cfg["vocab_size"], C)
        self.wpe = nn.Embedding(cfg["n_positions"], C)
        self.h = nn.ModuleList(Block(C, cfg["n_head"], T, eps)
                               for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(C, eps=eps)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)),
                               targets.reshape(-1))


def make_optimizer(model, device):
    """AdamW as Loom's (wd 0.01 on >= 2-dim parameters), fused when possible."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.01},
              {"params": other, "weight_decay": 0.0}]
    params = inspect.signature(torch.optim.AdamW).parameters
    if device.type == "cuda" and "fused" in params:
        return torch.optim.AdamW(groups, lr=1e-4, fused=True), "fused"
    why = ("not a CUDA device" if device.type != "cuda"
           else f"torch {torch.__version__} has no fused AdamW")
    if "foreach" in params:
        print(f"fallback: AdamW foreach instead of fused ({why})")
        return torch.optim.AdamW(groups, lr=1e-4, foreach=True), "foreach"
    print(f"fallback: AdamW for-loop instead of fused ({why})")
    return torch.optim.AdamW(groups, lr=1e-4), "for-loop"


def load_tokens(path, need, vocab):
    """llm.c token file: 256 int32 header (magic 20240520, version 1, count)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(f"cannot read the token file {path}: {e}")
    header = torch.frombuffer(bytearray(raw[:1024]), dtype=torch.int32) \
        if len(raw) >= 1024 else None
    if header is None or int(header[0]) != 20240520 or int(header[1]) != 1:
        fail(f"{path} is not an llm.c token file (magic 20240520, version 1)")
    count = int(header[2])
    if len(raw) < 1024 + 2 * count or count < need:
        fail(f"{path} holds {count} tokens; one batch needs {need} "
             f"(use a smaller --batch / --seq)")
    tokens = torch.frombuffer(bytearray(raw[1024:1024 + 2 * need]),
                              dtype=torch.int16).to(torch.int64) & 0xFFFF
    if int(tokens.max()) >= vocab:
        fail(f"{path} has token {int(tokens.max())} >= vocab_size {vocab}")
    return tokens


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="HF GPT-2 config.json (default: GPT-2 124M)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, help="default: the config's n_positions")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--data", help="llm.c token file (default: random tokens)")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (default: eager)")
    ap.add_argument("--json", help="write the figures as JSON here")
    args = ap.parse_args()

    cfg = load_config(args.config)
    T = args.seq or cfg["n_positions"]
    if T > cfg["n_positions"] or T < 1:
        fail(f"--seq {T} must be in 1..n_positions ({cfg['n_positions']})")
    if args.batch < 1 or args.steps < 1 or args.warmup < 0:
        fail("--batch and --steps must be >= 1, --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch.cuda.is_available() is False "
             "(no GPU or no CUDA build of torch); use --device cpu")
    device = torch.device("cuda" if args.device == "cuda" or (
        args.device == "auto" and torch.cuda.is_available()) else "cpu")
    B, L, C, V = args.batch, cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]

    torch.manual_seed(1337)
    model = GPT2(cfg, T).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer, adamw_kind = make_optimizer(model, device)
    if not HAVE_SDPA:
        print(f"fallback: explicit masked softmax attention (torch "
              f"{torch.__version__} has no scaled_dot_product_attention)")
    step_fn = model
    if args.compile:
        if not hasattr(torch, "compile"):
            fail(f"--compile: torch {torch.__version__} has no torch.compile")
        step_fn = torch.compile(model)

    if args.data:
        tokens = load_tokens(args.data, B * T + 1, V).to(device)
    else:
        g = torch.Generator().manual_seed(1337)
        tokens = torch.randint(0, V, (B * T + 1,), generator=g).to(device)
    x, y = tokens[:-1].view(B, T), tokens[1:].view(B, T)

    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                if args.dtype == "bf16" else None)
    flops_per_token = 6 * n_params + 6 * L * C * T
    attention = "sdpa" if HAVE_SDPA else "masked-softmax"
    print(f"torch {torch.__version__} GPT-2 training: {n_params:,} parameters, "
          f"L={L} C={C} V={V}, B={B} T={T}, {device.type}"
          f"{' ' + torch.cuda.get_device_name(device) if device.type == 'cuda' else ''}, "
          f"{args.dtype}{' autocast' if autocast else ''}, attention {attention}, "
          f"AdamW {adamw_kind}{', torch.compile' if args.compile else ', eager'}")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        if autocast is not None:
            with autocast:
                loss = step_fn(x, y)
        else:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        train_step()
    sync()
    print(f"{'step':>4} {'loss':>10} {'ms':>10} {'tokens/s':>12}")
    times, losses = [], []
    for s in range(args.steps):
        t0 = time.perf_counter()
        loss = train_step()
        sync()
        dt = time.perf_counter() - t0
        times.append(dt)
        losses.append(loss.item())
        print(f"{s:>4} {losses[-1]:>10.4f} {dt * 1e3:>10.2f} {B * T / dt:>12.0f}")
    tokens_per_s = B * T * len(times) / sum(times)
    mfu = flops_per_token * tokens_per_s / (args.peak_tflops * 1e12)
    print(f"tokens/s: {tokens_per_s:.0f}")
    print(f"MFU: {100 * mfu:.2f}% (flops/token {flops_per_token:,} = "
          f"6N + 6LCT; peak {args.peak_tflops:g} TFLOP/s)")
    if args.json:
        figures = {
            "framework": f"torch {torch.__version__}", "device": device.type,
            "params": n_params, "n_layer": L, "n_embd": C, "vocab_size": V,
            "batch": B, "seq": T, "dtype": args.dtype, "attention": attention,
            "adamw": adamw_kind, "compiled": bool(args.compile),
            "steps": len(times), "step_ms": [t * 1e3 for t in times],
            "losses": losses,
            "tokens_per_s": tokens_per_s, "flops_per_token": flops_per_token,
            "peak_tflops": args.peak_tflops, "mfu": mfu,
        }
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
