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

Arguments: the loom binary, the loom-opt binary, the config, a work
directory."""
import json
import os
import subprocess
import sys

loom, loom_opt, config, work = sys.argv[1:5]
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
print("loom plan's memory agrees with loom compile's arena" if ok
      else "LOOM PLAN'S MEMORY DISAGREES WITH LOOM COMPILE'S ARENA")
sys.exit(0 if ok else 1)
