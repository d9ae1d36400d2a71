#!/usr/bin/env python3
"""perf_report: the one table of scripts/gpu-check step d (issue 8, 5d).

Reads what step d's runs wrote and prints
  1. GPT-2 training: Loom (loom-run --log-json) and PyTorch (torch_gpt2.py
     --json) tokens/s, MFU (llm.c: 6N + 6LCT flops per token, N from the
     HF config with the tied wte counted once) and the Loom/PyTorch ratio;
     with --loom-log-unfused, the same Loom program run with no instruction
     pairs fused (LOOM_CUDA_GELU_EPILOGUE=0 LOOM_CUDA_BIAS_GRAD_EPILOGUE=0
     LOOM_CUDA_RESIDUAL_NORM=0 LOOM_CUDA_FUSED_CROSS_ENTROPY=0: each GELU
     outside its GEMM, each bias gradient summed apart from its weight
     gradient's GEMM, each residual Add apart from its layer norm, the loss
     apart from its gradient) and the fused run's speed against it; with --loom-log-wide,
     the same program with its tensor-core attention in blocks of 8 warps
     (LOOM_CUDA_FLASH_SHAPE=wide) and its speed against the default run
     (each attention kernel in the launch shape it ran fastest in when
     timed at the first step, which the report prints from the log);
     with --loom-log-selective, the program compiled with --recompute
     selective (each block's GELU recomputed in its backward) and its speed
     against the default run: what that memory costs in time; and the
     losses the timed runs trained to (a throughput measured on a run
     whose loss is not finite is reported missing; with --uniform-tokens,
     the data gpu-check makes, each loss must also lie within
     UNIFORM_LOSS_BAND of ln V);
  2. per GEMM: cuBLASLt (loom-bench-gemm-cublaslt --json) and torch.matmul
     (torch_matmul.py --json) TFLOP/s and their ratio (the dw+bias rows,
     a weight gradient with its bias gradient, shown but not counted in
     the per-GEMM goal);
  3. attention: naive vs flash time (loom-bench-attention-cuda --json) and
     how far apart their results are; beside them PyTorch's attention on the
     same shape (torch_attention.py --json) and the bf16 flash kernels'
     speed against it; and the tensor-core kernels' other launch shapes
     (tc-blocks: more blocks per SM; tc-wide: blocks of 8 warps; tc-tall:
     the forward's warps 32 rows each) against the default (tc-spill0).
and each of issue 8's goals with met / not met. A figure whose run failed
is reported missing with the file it was looked for in. With --json F the
figures are also written for scripts. Exit status: 0 when every figure is
there and flash agrees with naive, 1 otherwise (goals do not change it:
they are measurements, not checks).

  perf_report.py --config CFG.json --batch B --seq T [--loom-log F.jsonl]
      [--loom-log-unfused F.jsonl] [--loom-log-wide F.jsonl]
      [--loom-log-selective F.jsonl] [--loom-warmup 2]
      [--loom-precision fp32|bf16] [--torch-gpt2 F.json]
      [--gemm-loom F.json] [--gemm-torch F.json] [--attention F.json]
      [--attention-torch F.json] [--uniform-tokens]
      [--peak-tflops 989] [--device NAME] [--json F]
"""
import argparse
import json
import math
import sys

# flash vs naive at one GPT-2 layer, fp32, inputs in [-1, 1): both are fp32
# computations of the same values, so only summation order differs.
ATTENTION_OUT_TOL = 1e-4
ATTENTION_DQKV_TOL = 1e-3
# A sanity band, not a tolerance: on tokens drawn uniformly from the
# vocabulary a GPT-2 at its initialization (weights of std 0.02: logits of
# a few tenths) predicts them about uniformly, a few tenths above ln V, and
# step d's runs then take at most 13 Adam steps at lr 1e-4 on two batches
# they can only start to memorize: each weight moves by at most about
# 1.3e-3, the LM head's part of a logit by at most about 0.8 at C = 768
# (PyTorch's 13 steps on the toy rehearsal end 0.47 below ln V). A loss
# further than 1.5 from ln V means the step computes something else
# (a NaN, a broken kernel's garbage logits).
UNIFORM_LOSS_BAND = 1.5


def params_of(cfg):
    """GPT-2 parameter count with the LM head tied to wte."""
    L, C, V, P = (cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"],
                  cfg["n_positions"])
    per_block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C \
        + (C * 4 * C + 4 * C) + (4 * C * C + C)
    return V * C + P * C + L * per_block + 2 * C


def read_json(path, missing, what):
    if not path:
        missing.append(f"{what}: not run")
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        missing.append(f"{what}: no figures in {path} ({e.__class__.__name__})")
        return None


def loom_figures(path, warmup, tokens_per_step, missing,
                 what="Loom GPT-2 training"):
    """Mean step time of the steps after `warmup` from loom-run --log-json."""
    if not path:
        missing.append(f"{what}: not run")
        return None
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        missing.append(f"{what}: no log in {path} ({e.__class__.__name__})")
        return None
    steps = [r for r in rows if "step" in r and "step_ms" in r]
    timed = steps[warmup:]
    if not timed:
        missing.append(f"{what}: {len(steps)} steps in {path}, "
                       f"none after the {warmup} warm-up steps")
        return None
    ms = sum(r["step_ms"] for r in timed) / len(timed)
    # What the CUDA kernels chose on the device (the attention's launch
    # shapes under LOOM_CUDA_FLASH_SHAPE=auto), from the run's summary.
    choices = [c for r in rows if r.get("summary")
               for c in r.get("kernel_choices", [])]
    # loom-run logs a loss that is not finite as null.
    return {"steps": len(timed), "step_ms": ms,
            "tokens_per_s": tokens_per_step / (ms * 1e-3),
            "losses": [r.get("loss") for r in steps],
            "kernel_choices": choices}


def check_losses(what, losses, vocab, uniform, missing):
    """Adds to `missing` why `losses` cannot come from a working step."""
    for step, loss in enumerate(losses):
        if not isinstance(loss, (int, float)) or not math.isfinite(loss):
            missing.append(f"{what}: loss {loss} at step {step} is not finite")
            return
        if uniform and abs(loss - math.log(vocab)) > UNIFORM_LOSS_BAND:
            missing.append(
                f"{what}: loss {loss:.4f} at step {step} is more than "
                f"{UNIFORM_LOSS_BAND:g} from ln V = {math.log(vocab):.4f} "
                f"on uniformly random tokens")
            return


def main():
    ap = argparse.ArgumentParser(prog="perf_report")
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--loom-log")
    ap.add_argument("--loom-log-unfused")
    ap.add_argument("--loom-log-wide")
    ap.add_argument("--loom-log-selective")
    ap.add_argument("--loom-warmup", type=int, default=2)
    ap.add_argument("--loom-precision", default="fp32")
    ap.add_argument("--torch-gpt2")
    ap.add_argument("--gemm-loom")
    ap.add_argument("--gemm-torch")
    ap.add_argument("--attention")
    ap.add_argument("--attention-torch")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--device", default="")
    ap.add_argument("--uniform-tokens", action="store_true",
                    help="the runs trained on tokens drawn uniformly from "
                         "the vocabulary: hold each loss to ln V +- "
                         f"{UNIFORM_LOSS_BAND:g}")
    ap.add_argument("--json")
    args = ap.parse_args()
    try:
        with open(args.config) as f:
            cfg = json.load(f)
        n = params_of(cfg)
    except (OSError, ValueError, KeyError) as e:
        print(f"perf_report: error: cannot read the GPT-2 config {args.config}: "
              f"{e}", file=sys.stderr)
        return 2
    missing, report = [], {}
    B, T = args.batch, args.seq
    L, C = cfg["n_layer"], cfg["n_embd"]
    flops_per_token = 6 * n + 6 * L * C * T
    peak = args.peak_tflops * 1e12

    # 1. Training throughput.
    print(f"GPT-2 training: {n:,} parameters, L={L} C={C}, B={B} T={T}"
          f"{', ' + args.device if args.device else ''}; MFU = "
          f"{flops_per_token:,} flops/token (6N + 6LCT) x tokens/s / "
          f"{args.peak_tflops:g} TFLOP/s")
    loom = loom_figures(args.loom_log, args.loom_warmup, B * T, missing)
    torch_fig = read_json(args.torch_gpt2, missing, "PyTorch GPT-2 training")
    print(f"  {'':<34} {'tokens/s':>10} {'MFU':>8} {'step ms':>9}")
    rows = []
    if loom:
        loom["mfu"] = flops_per_token * loom["tokens_per_s"] / peak
        rows.append((f"Loom ({args.loom_precision} program, loom-run cuda)",
                     loom))
        report["loom_training"] = dict(loom, precision=args.loom_precision)
    if torch_fig:
        if torch_fig.get("params") != n:
            missing.append(f"PyTorch GPT-2 has {torch_fig.get('params')} "
                           f"parameters, the config {n}: not the same model")
        t = {"tokens_per_s": torch_fig["tokens_per_s"],
             "mfu": flops_per_token * torch_fig["tokens_per_s"] / peak,
             "step_ms": sum(torch_fig["step_ms"]) / len(torch_fig["step_ms"])}
        label = (f"PyTorch ({torch_fig['dtype']}, {torch_fig['attention']}, "
                 f"AdamW {torch_fig['adamw']}"
                 f"{', compiled' if torch_fig.get('compiled') else ', eager'})")
        rows.append((label, t))
        report["torch_training"] = dict(t, label=label)
    # The same program run another way, after Loom's row: with no pairs
    # fused (gelu_epilogues.h, the bias-gradient epilogue, residual_norms.h,
    # cross_entropy_fusion.h),
    # what running them as one call each gains; with the attention in
    # 8-warp blocks, what that shape would gain as the default; with the
    # GELU recomputed (--recompute selective), what its memory costs. Each:
    # (log, row label, what is missing, report key, speed line, whether the
    # variant is the faster one when its speed is > 1).
    variants = [
        (args.loom_log_unfused, "Loom, instruction pairs unfused",
         "Loom GPT-2 training, pairs unfused", "fused_pairs_speed",
         "fused pairs speed (> 1: GEMM + GELU, GEMM + bias gradient, Add + "
         "LayerNorm, loss + gradient in one call each faster)", False),
        (args.loom_log_wide, "Loom, attention in 8-warp blocks",
         "Loom GPT-2 training, attention in 8-warp blocks",
         "wide_attention_speed",
         "wide attention speed (> 1: LOOM_CUDA_FLASH_SHAPE=wide faster than "
         "the shapes timed at the first step)", True),
        (args.loom_log_selective, "Loom, GELU recomputed (selective)",
         "Loom GPT-2 training, --recompute selective",
         "selective_recompute_speed",
         "selective recompute speed (> 1: --recompute selective faster)",
         True),
    ]
    speeds = []
    for log, label, what, key, line, variantFaster in variants:
        fig = (loom_figures(log, args.loom_warmup, B * T, missing, what)
               if log else None)
        if not fig:
            continue
        fig["mfu"] = flops_per_token * fig["tokens_per_s"] / peak
        rows.insert(len(speeds) + 1 if loom else len(speeds), (label, fig))
        if loom:
            speed = (loom["step_ms"] / fig["step_ms"] if variantFaster
                     else fig["step_ms"] / loom["step_ms"])
            speeds.append((key, line, speed))
    for label, fig in rows:
        print(f"  {label:<34} {fig['tokens_per_s']:>10.0f} "
              f"{100 * fig['mfu']:>7.2f}% {fig['step_ms']:>9.2f}")
    for key, line, speed in speeds:
        report[key] = speed
        print(f"  {line}: {speed:.3f}x")
    if loom and loom["kernel_choices"]:
        report["kernel_choices"] = loom["kernel_choices"]
        for c in loom["kernel_choices"]:
            print(f"  Loom's kernels chose: {c}")
    # The losses each timed run trained to: a throughput is a measurement of
    # training only where the step trains.
    V = cfg["vocab_size"]
    trained = [(label, fig["losses"]) for label, fig in rows
               if "losses" in fig]
    if torch_fig and "losses" in torch_fig:
        trained.append(("PyTorch", torch_fig["losses"]))
    for label, losses in trained:
        check_losses(label, losses, V, args.uniform_tokens, missing)
    if trained:
        def shown(x):
            finite = isinstance(x, (int, float)) and math.isfinite(x)
            return f"{x:.4f}" if finite else str(x)
        print(f"  loss, first -> last step (ln V = {math.log(V):.4f}"
              f"{'; uniformly random tokens' if args.uniform_tokens else ''}): "
              + "; ".join(f"{label.split(' (')[0]} {shown(l[0])} -> "
                          f"{shown(l[-1])} over {len(l)}"
                          for label, l in trained if l))
        report["losses"] = {label: l for label, l in trained}
    if loom and torch_fig:
        ratio = loom["tokens_per_s"] / torch_fig["tokens_per_s"]
        report["loom_over_torch"] = ratio
        print(f"  Loom / PyTorch tokens/s: {ratio:.3f}x")
        print(f"  goal MFU >= 40%: {'met' if loom['mfu'] >= 0.4 else 'not met'}; "
              f"goal Loom/PyTorch >= 1.0x: {'met' if ratio >= 1.0 else 'not met'}")

    # 2. GEMMs.
    lt = read_json(args.gemm_loom, missing, "cuBLASLt GEMM benchmark")
    tt = read_json(args.gemm_torch, missing, "torch.matmul GEMM benchmark")
    if lt or tt:
        print(f"\nbf16 GEMMs of GPT-2 at B={B} T={T} (TFLOP/s)")
        print(f"  {'gemm':<17} {'M':>7} {'N':>7} {'K':>7} {'cuBLASLt':>9} "
              f"{'torch':>9} {'ratio':>7}")
        by_name = {r["gemm"]: r for r in (tt or [])}
        met, compared, gemms = 0, 0, []
        for r in (lt or tt):
            o = by_name.get(r["gemm"]) if lt else None
            if lt and o and (o["M"], o["N"], o["K"]) != (r["M"], r["N"], r["K"]):
                missing.append(f"GEMM {r['gemm']}: cuBLASLt ran "
                               f"{r['M']}x{r['N']}x{r['K']}, torch "
                               f"{o['M']}x{o['N']}x{o['K']}")
                o = None
            ratio = r["tflops"] / o["tflops"] if lt and o else None
            # The goal is per GEMM: a dw+bias row (Loom's weight gradient
            # with the bias gradient in its epilogue against torch.matmul
            # and a separate sum) is shown, not counted.
            if ratio is not None and not r["gemm"].endswith("+bias"):
                compared += 1
                met += ratio >= 0.95
            cell = lambda x: f"{x:>9.1f}" if x is not None else f"{'-':>9}"
            print(f"  {r['gemm']:<17} {r['M']:>7} {r['N']:>7} {r['K']:>7} "
                  f"{cell(r['tflops'] if lt else None)} "
                  f"{cell(o['tflops'] if o else (r['tflops'] if not lt else None))} "
                  f"{(f'{ratio:.3f}' if ratio is not None else '-'):>7}")
            gemms.append({"gemm": r["gemm"], "ratio": ratio})
        report["gemms"] = gemms
        if compared:
            print(f"  goal each GEMM within 5% of torch.matmul (ratio >= 0.95): "
                  f"{met}/{compared} met")

    # 3. Attention.
    att = read_json(args.attention, missing, "attention benchmark")
    if att:
        print("\ncausal attention, one GPT-2 layer, fp32 (forward + grad as the "
              "executor calls them)")
        print(f"  {'kernel':<10} {'forward ms':>11} {'grad ms':>9} {'total ms':>9}")
        k = {r["kernel"]: r for r in att}
        for r in att:
            print(f"  {r['kernel']:<10} {r['forward_ms']:>11.3f} "
                  f"{r['grad_ms']:>9.3f} {r['forward_ms'] + r['grad_ms']:>9.3f}")
        if "naive" in k and "flash" in k:
            f, nv = k["flash"], k["naive"]
            speedup = (nv["forward_ms"] + nv["grad_ms"]) / \
                (f["forward_ms"] + f["grad_ms"])
            agree = (f["max_abs_diff_out"] <= ATTENTION_OUT_TOL and
                     f["max_abs_diff_dqkv"] <= ATTENTION_DQKV_TOL)
            print(f"  flash / naive speed-up {speedup:.2f}x; max |flash - naive| "
                  f"out {f['max_abs_diff_out']:.3g} (<= {ATTENTION_OUT_TOL:g}), "
                  f"dqkv {f['max_abs_diff_dqkv']:.3g} (<= "
                  f"{ATTENTION_DQKV_TOL:g}): {'agree' if agree else 'DISAGREE'}")
            report["attention"] = {"speedup": speedup, "agree": agree}
            if not agree:
                missing.append("flash attention disagrees with naive")
        if "flash-bf16" in k:
            b16 = k["flash-bf16"]
            print(f"  flash-bf16: bf16 inputs, tensor cores at head size 64, "
                  f"backward given out and lse (no recompute); max |bf16 - "
                  f"naive| out {b16['max_abs_diff_out']:.3g}, dqkv "
                  f"{b16['max_abs_diff_dqkv']:.3g}")
            report.setdefault("attention", {})["bf16_total_ms"] = \
                b16["forward_ms"] + b16["grad_ms"]
        # The tensor-core kernels' other launch shapes (FlashTcOccupancy)
        # against the default (training times them itself and keeps each
        # kernel's fastest: the log's kernel choices above). tc-tall is a
        # forward shape: its backward runs as tc-spill0's.
        for name, meaning, key in (
                ("tc-blocks", "more blocks per SM", "occupancy_speed"),
                ("tc-wide", "blocks of 8 warps", "wide_blocks_speed"),
                ("tc-tall", "the forward's warps 32 rows each",
                 "tall_warps_speed")):
            if "tc-spill0" not in k or name not in k:
                continue
            base, other = k["tc-spill0"], k[name]
            speed = {part: base[part] / other[part]
                     for part in ("forward_ms", "grad_ms")}
            same = (other["max_abs_diff_out"] == 0 and
                    other["max_abs_diff_dqkv"] == 0)
            print(f"  {name} speed vs tc-spill0 (> 1: {meaning} "
                  f"faster): forward {speed['forward_ms']:.2f}x, grad "
                  f"{speed['grad_ms']:.2f}x; values "
                  + ("identical" if same else
                     f"differ (out {other['max_abs_diff_out']:.3g}, dqkv "
                     f"{other['max_abs_diff_dqkv']:.3g})"))
            report.setdefault("attention", {})[key] = speed
    if args.attention_torch:
        torch_att = read_json(args.attention_torch, missing,
                              "PyTorch attention benchmark")
        if torch_att:
            t = torch_att[0]
            print(f"  {t['kernel']:<10} {t['forward_ms']:>11.3f} "
                  f"{t['grad_ms']:>9.3f} {t['forward_ms'] + t['grad_ms']:>9.3f}"
                  f"  (PyTorch, {t['dtype']})")
            b16 = {r["kernel"]: r for r in (att or [])}.get("flash-bf16")
            if b16 and t["dtype"] == "bf16":
                speed = {part: t[part] / b16[part]
                         for part in ("forward_ms", "grad_ms")}
                speed["total"] = (t["forward_ms"] + t["grad_ms"]) / \
                    (b16["forward_ms"] + b16["grad_ms"])
                print(f"  flash-bf16 speed vs {t['kernel']} (> 1: Loom "
                      f"faster): forward {speed['forward_ms']:.2f}x, grad "
                      f"{speed['grad_ms']:.2f}x, total {speed['total']:.2f}x")
                report.setdefault("attention", {})["bf16_vs_torch"] = speed

    for m in missing:
        print(f"missing: {m}")
    if args.json:
        report["missing"] = missing
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
