"""Runs `loom plan --json` on fixed plans and checks the cost model's
figures against the published formulas (see loom-plan-formulas.test).
Arguments: the loom binary, the examples directory, the directory holding
--loom-report JSON files report0..3.json of GPT-2 124M at dp=8."""
import json
import os
import subprocess
import sys

loom, examples, work = sys.argv[1:4]
ok = True


def plan(config, *flags):
    out = subprocess.run(
        [loom, "plan", "--config", os.path.join(examples, config),
         "--gpu-mem-gb", "1e6", "--json", *flags],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


# 1. ZeRO model state and DP traffic, against --loom-report.
phi = 124439808
n = 8
print(f"ZeRO on GPT-2 124M, Phi = {phi}, dp = {n}")
want_mixed = [16, 4 + 12 / n, 2 + 14 / n, 16 / n]
want_fp32 = [16, 8 + 8 / n, 4 + 12 / n, 16 / n]
same_as_report = True
ddp = None
for z in range(4):
    # The unpadded vocabulary: Phi is GPT-2's own parameter count.
    fixed = ["--gpus", "8", "--batch", "8", "--seq", "1024", "--mesh", "dp=8",
             "--zero", str(z), "--microbatches", "1", "--recompute", "none",
             "--vocab-divisible-by", "1"]
    mixed = plan("gpt2-124m.json", *fixed)
    fp32 = plan("gpt2-124m.json", *fixed, "--precision", "fp32")
    report = json.load(open(os.path.join(work, f"report{z}.json")))
    ok &= mixed["model"]["params"] == phi == report["global_params"]
    m_bytes = mixed["memory"]["model_state_bytes"]
    f_bytes = fp32["memory"]["model_state_bytes"]
    same_as_report &= m_bytes == report["model_state_bytes_bf16_mixed"]
    same_as_report &= f_bytes == report["model_state_bytes"]
    ok &= abs(m_bytes / phi - want_mixed[z]) < 1e-9
    ok &= abs(f_bytes / phi - want_fp32[z]) < 1e-9
    dp_bytes = mixed["traffic_bytes_per_gpu_per_step"]["dp"]
    ddp = ddp or dp_bytes
    ok &= abs(ddp - 2 * (n - 1) / n * 2 * phi) <= 1
    print(f"zero={z}: bf16 mixed {m_bytes / phi:.2f} Phi = {m_bytes} bytes, "
          f"fp32 {f_bytes / phi:.2f} Phi = {f_bytes} bytes, "
          f"dp traffic {dp_bytes / ddp:.2f} x DDP")
ok &= same_as_report
print("model state equals --loom-report at every stage" if same_as_report
      else "MODEL STATE DIFFERS FROM --loom-report")

# 1b. bf16 with fp32 gradients (--grad-precision fp32): 18Φ, 6Φ+12Φ/N,
# 2Φ+16Φ/N, 18Φ/N, and gradient collectives of 4-byte elements (DDP sends
# what fp32 DDP sends: twice the bf16 all-reduce).
want_fp32_grads = [18, 6 + 12 / n, 2 + 16 / n, 18 / n]
for z in range(4):
    # The unpadded vocabulary: Phi is GPT-2's own parameter count.
    fixed = ["--gpus", "8", "--batch", "8", "--seq", "1024", "--mesh", "dp=8",
             "--zero", str(z), "--microbatches", "1", "--recompute", "none",
             "--vocab-divisible-by", "1"]
    got = plan("gpt2-124m.json", *fixed, "--grad-precision", "fp32")
    g_bytes = got["memory"]["model_state_bytes"]
    ok &= got["grad_precision"] == "fp32" and got["precision"] == "bf16"
    ok &= abs(g_bytes / phi - want_fp32_grads[z]) < 1e-9
    dp_bytes = got["traffic_bytes_per_gpu_per_step"]["dp"]
    if z == 0:
        ok &= abs(dp_bytes - 2 * ddp) <= 1
    print(f"zero={z} fp32 grads: {got['memory']['model_state_formula']} = "
          f"{g_bytes / phi:.2f} Phi = {g_bytes} bytes, dp traffic "
          f"{dp_bytes / ddp:.2f} x bf16 DDP")

# 2. Korthikanti et al. 2022, bytes per layer per micro-batch.
s, b, h, a, t = 2048, 1, 12288, 96, 8
sbh = s * b * h
print(f"activations per layer, GPT-3 175B, s={s} b={b} h={h} a={a} t={t}")
cases = [  # (tp, recompute, sequence parallel, precision, expected bytes)
    (1, "none", False, "bf16", sbh * (34 + 5 * a * s / h)),
    (8, "none", False, "bf16", sbh * (10 + 24 / t + 5 * a * s / (h * t))),
    (8, "none", True, "bf16", sbh * (34 + 5 * a * s / h) / t),
    (1, "selective", False, "bf16", sbh * 34),
    (8, "selective", False, "bf16", sbh * (10 + 24 / t)),
    (8, "selective", True, "bf16", sbh * 34 / t),
    (1, "full", False, "bf16", 2 * sbh),
    (8, "full", False, "bf16", 2 * sbh),
    (8, "full", True, "bf16", 2 * sbh / t),
    (1, "none", False, "fp32", 2 * sbh * (34 + 5 * a * s / h)),
]
formulas_ok = True
for tp, rc, sp, precision, want in cases:
    flags = ["--gpus", str(tp), "--gpus-per-node", "8", "--batch", "1",
             "--seq", "2048", "--mesh", f"dp=1,tp={tp},pp=1",
             "--microbatches", "1", "--recompute", rc, "--precision", precision]
    if not sp:
        flags.append("--no-sequence-parallel")
    got = plan("gpt3-175b.json", *flags)
    mem = got["memory"]
    formulas_ok &= mem["activation_bytes_per_layer"] == round(want)
    formulas_ok &= got["sequence_parallel"] == sp
    label = f"t={tp} {rc}{'+sp' if sp else ''}{' fp32' if precision == 'fp32' else ''}"
    print(label, mem["activation_formula"], mem["activation_bytes_per_layer"])
ok &= formulas_ok
print("activation formulas hold" if formulas_ok else "ACTIVATION FORMULAS DO NOT HOLD")

# 3. Megatron TP traffic; pipeline in-flight micro-batches and bubble.
#    Megatron's formula, and what Loom's program adds to it (as
#    loom-plan-vs-compile.test measures): the embedding's and LM head's
#    all-reduce of b·s·h and the cross-entropy's 3 fp32 all-reduces per
#    token; with sequence parallelism 10 (not 8) collectives of
#    (t-1)/t·b·s·h per layer (the backward re-gathers each column-parallel
#    linear's input), 4 at the embedding and head, and wpe's gradient.
tp_flags = ["--gpus", "8", "--batch", "1", "--seq", "2048", "--mesh",
            "dp=1,tp=8,pp=1", "--microbatches", "1", "--recompute",
            "selective"]
ar = 2 * (t - 1) / t * sbh * 2
ag = (t - 1) / t * sbh * 2
cross_entropy = 3 * 2 * (t - 1) / t * 4 * s * b
for sp in (False, True):
    got = plan("gpt3-175b.json", *tp_flags,
               *([] if sp else ["--no-sequence-parallel"]))
    stage = got["memory"]["stages"][0]["traffic_bytes_per_step"]
    tp_bytes = got["traffic_bytes_per_gpu_per_step"]["tp"]
    ok &= stage["tp_formula"] == round(4 * 96 * ar)
    if sp:
        # + the layer norms' gradients, partial over tp with SP.
        norms = (96 * 4 * h + 2 * h) * 2
        loom_bytes = (96 * 10 * ag + 4 * ag + (t - 1) / t * s * h * 2 +
                      2 * (t - 1) / t * norms)
    else:
        loom_bytes = 4 * 96 * ar + 2 * ar
    ok &= abs(tp_bytes - (loom_bytes + cross_entropy)) <= 1
    print(f"tensor parallelism, t=8{', sp' if sp else ''}: tp traffic "
          f"formula 4 all-reduces x 96 layers x 2(t-1)/t x b*s*h*2 bytes = "
          f"{stage['tp_formula']}, Loom's program {tp_bytes} "
          f"(+{100 * (tp_bytes / stage['tp_formula'] - 1):.2f}%) bytes per "
          f"GPU per step")
pipeline_ok = True
p, m = 8, 16
for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
    flags = ["--gpus", "8", "--batch", "16", "--seq", "2048",
             "--mesh", "dp=1,tp=1,pp=8", "--microbatches", str(m),
             "--recompute", "none", "--schedule", schedule]
    if v > 1:
        flags += ["--virtual-stages", str(v)]
    got = plan("gpt3-175b.json", *flags)
    stages = got["memory"]["stages"]
    per_layer = got["memory"]["loom_activation_bytes_per_layer"]
    flight = [st["microbatches_in_flight"] for st in stages]
    want_flight = {"gpipe": [m] * p, "1f1b": [p - i for i in range(p)],
                   "interleaved": None}[schedule]
    if schedule == "interleaved":
        pipeline_ok &= abs(flight[0] - p * (1 + (p - 1) / (p * v))) < 1e-12
    else:
        pipeline_ok &= flight == want_flight
    # Stage 0 holds its layers x in-flight micro-batches of activations
    # in its stash slots, and in its arena one action's working set: here
    # a block's backward, 16-bit sbh(1 + 8/t) + 4h^2/t bytes (b = 1 row per
    # micro-batch, s = 2048, h = 12288, t = 1), more than the embedding's
    # gradient.
    h = 12288
    working = 2 * 2048 * 1 * h * (1 + 8) + 2 * 4 * h * h
    pipeline_ok &= abs(stages[0]["activation_bytes"] -
                       stages[0]["layers"] * flight[0] * per_layer -
                       working) <= 1
    bubble = (p - 1) / v / (m + (p - 1) / v)
    pipeline_ok &= abs(got["predicted_bubble"] - bubble) < 1e-12
    shown = " ".join(f"{f:.2f}" for f in (flight if schedule == "1f1b" else flight[:1]))
    name = schedule + (f" v={v}" if v > 1 else "")
    print(f"pipeline p={p} m={m}: {name} in flight {shown} "
          f"bubble {got['predicted_bubble']:.4f}")
ok &= pipeline_ok
print("pipeline formulas hold" if pipeline_ok else "PIPELINE FORMULAS DO NOT HOLD")
sys.exit(0 if ok else 1)
