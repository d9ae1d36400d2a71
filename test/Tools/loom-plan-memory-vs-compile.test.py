"""Compares `loom plan`'s memory per GPU with the arena `loom compile`
plans for the same unpipelined plan (--loom-report's predicted_peak_bytes:
every tensor of the step, the model state included).

The plan's tensors are its model state + activations (what Loom's backward
reads, per layer, plus the larger of the LM head's logits with their
gradient and full recomputation's re-run layer) + ZeRO-3's gathered
blocks; it must lie within [-10%, +2%] of the arena. What it leaves out,
and so the low side: the collectives' scratch (DDP's packed buckets, the
ZeRO update's shards) and the backward's short-lived gradients, which its
workspace term (1 GB + 5%) covers: the plan's whole peak must be at least
the arena. Korthikanti et al.'s count for Megatron (dropout masks, stored
attention scores) is printed next to it for comparison.

Pipelined plans (pp=2, pp=4 with 1F1B and with full recomputation,
interleaved pp=2 x 2; batch 16 in 2·pp micro-batches): a stage holds its
arena, one action's working set (model state, a block's backward
gradients or full recomputation's re-run layer, the first stage's
embedding gradient, the last stage's logit gradient),
and its stash slots, which hold the in-flight micro-batches' saved values
(and, on the last stage, their logits) written there by each forward; the
compiled figure is the arena plus the stash peak the compiler's schedule
predicts (loom-translate --loom-program-dump); the same [-10%, +2%] per
stage (the plan cuts the stages where the compiler does:
loom-plan-stage-cut.test).

Arguments: the loom binary, the loom-opt binary, the loom-translate binary,
the config, a work directory."""
import json
import os
import re
import subprocess
import sys

loom, loom_opt, loom_translate, config, work = sys.argv[1:6]
BATCH, SEQ = 8, 1024
LOW, HIGH = -0.10, 0.02

# (dp, tp, micro-batches, ZeRO, recompute, sequence parallel)
PLANS = [(1, 1, 1, 0, "none", False),
         (1, 2, 1, 0, "none", False),
         (1, 4, 1, 0, "full", True),
         (2, 1, 2, 1, "selective", False),
         (2, 1, 2, 3, "none", False),
         (4, 2, 1, 2, "none", True)]


def run(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


ok = True
print(f"{'plan':<36} {'plan tensors':>13} {'compiled':>13} {'diff':>8} "
      f"{'plan peak':>13} {'saved: Loom':>12} {'Korthikanti':>12}")
for precision in ("bf16", "fp32"):
    for dp, tp, micro, zero, recompute, sp in PLANS:
        strategy = ["--mesh", f"dp={dp},tp={tp},pp=1", "--zero", str(zero),
                    "--microbatches", str(micro), "--recompute", recompute,
                    "--precision", precision]
        name = (f"dp{dp} tp{tp} m{micro} z{zero} {recompute}"
                f"{' sp' if sp else ''} {precision}")
        tag = name.replace(" ", "-")
        ir = os.path.join(work, tag + ".mlir")
        run(loom, "compile", "--config", config, "--batch", str(BATCH),
            "--seq", str(SEQ), "--train", *strategy,
            *(["--sequence-parallel"] if sp else []), "--emit-ir", ir, "-o",
            os.path.join(work, tag + ".loom"))
        arena = json.loads(run(loom_opt, "--loom-report=json=true", ir, "-o",
                               os.devnull))["predicted_peak_bytes"]
        plan = json.loads(run(
            loom, "plan", "--config", config, "--gpus", str(dp * tp),
            "--gpu-mem-gb", "1e6", "--batch", str(BATCH), "--seq", str(SEQ),
            *strategy, *([] if sp else ["--no-sequence-parallel"]), "--json"))
        memory = plan["memory"]
        tensors = (memory["model_state_bytes"] + memory["activation_bytes"] +
                   memory["gathered_bytes"])
        diff = tensors / arena - 1
        peak = plan["predicted_peak_bytes_per_gpu"]
        good = LOW <= diff <= HIGH and peak >= arena
        ok &= good
        # The saved activations of the model's 12 layers: Loom's, and
        # Megatron's by the formula.
        layers = 12
        saved = memory["loom_activation_bytes_per_layer"] * layers
        formula = memory["activation_bytes_per_layer"] * layers
        print(f"{name:<36} {tensors:>13} {arena:>13} {100 * diff:>+7.2f}% "
              f"{peak:>13} {saved:>12} {formula:>12}"
              f"{'' if good else '  OUTSIDE'}")

# Pipelines: (pp, tp, ZeRO, dp, schedule, recompute, sequence parallel),
# 2 micro-batches per stage; interleaved with 2 chunks per stage.
PIPELINES = [(2, 1, 0, 1, "1f1b", "none", False),
             (2, 1, 0, 1, "gpipe", "none", False),
             (2, 2, 0, 1, "1f1b", "none", True),
             (2, 1, 0, 1, "1f1b", "full", False),
             (2, 1, 3, 2, "1f1b", "none", False),
             (4, 1, 0, 1, "1f1b", "none", False),
             (4, 1, 0, 1, "1f1b", "full", False),
             (2, 1, 0, 1, "interleaved", "none", False)]
print(f"{'pipelined plan, per stage':<36} {'plan tensors':>13} "
      f"{'arena+stash':>13} {'diff':>8}")
for precision in ("bf16", "fp32"):
    for pp, tp, zero, dp, schedule, recompute, sp in PIPELINES:
        micro = 2 * pp
        strategy = ["--mesh", f"dp={dp},tp={tp},pp={pp}", "--zero",
                    str(zero), "--microbatches", str(micro), "--schedule",
                    schedule, "--recompute", recompute, "--precision",
                    precision]
        if schedule == "interleaved":
            strategy += ["--virtual-stages", "2"]
        name = (f"dp{dp} tp{tp} pp{pp} m{micro} {schedule} z{zero} "
                f"{recompute}{' sp' if sp else ''} {precision}")
        program = os.path.join(work, name.replace(" ", "-") + ".loom")
        run(loom, "compile", "--config", config, "--batch", "16", "--seq",
            str(SEQ), "--train", *strategy,
            *(["--sequence-parallel"] if sp else []), "-o", program)
        dump = run(loom_translate, "--loom-program-dump", program)
        arenas = [int(x) for x in
                  re.findall(r"^stage \d+: arena (\d+) bytes", dump, re.M)]
        stashes = [int(x) for x in re.findall(r"stash peak (\d+) bytes", dump)]
        plan = json.loads(run(
            loom, "plan", "--config", config, "--gpus", str(dp * tp * pp),
            "--gpu-mem-gb", "1e6", "--batch", "16", "--seq", str(SEQ),
            *strategy, *([] if sp else ["--no-sequence-parallel"]), "--json"))
        stages = plan["memory"]["stages"]
        ok &= len(arenas) == len(stashes) == len(stages) == pp
        for i, (arena, stash, st) in enumerate(zip(arenas, stashes, stages)):
            tensors = (st["model_state_bytes"] + st["activation_bytes"] +
                       st["gathered_bytes"])
            diff = tensors / (arena + stash) - 1
            good = LOW <= diff <= HIGH
            ok &= good
            print(f"{name + ' stage ' + str(i):<36} {tensors:>13} "
                  f"{arena + stash:>13} {100 * diff:>+7.2f}%"
                  f"{'' if good else '  OUTSIDE'}")
print("loom plan's memory agrees with loom compile's arena" if ok
      else "LOOM PLAN'S MEMORY DISAGREES WITH LOOM COMPILE'S ARENA")
sys.exit(0 if ok else 1)
