"""Compares `loom plan --json`, restricted to one plan, with what
`loom compile --train ... --report` builds for the same plan (see
loom-plan-vs-compile.test): per pipeline stage, the model state per GPU
(fp32 and bf16 mixed precision) and the bytes one GPU sends per step on
each mesh axis. Prints a table of plan vs compiled per figure.

Arguments: the loom binary, the loom-opt binary, the config, a work
directory, and optionally `bf16`: compile in bf16 mixed precision
(--precision bf16) and compare with `loom plan --precision bf16` (the
compiled state is then the bf16 figure itself, and the traffic is the bf16
plan's: 2-byte tensors, f32 loss statistics and scalars), or
`bf16-fp32-grads`: the same with --grad-precision fp32 on both sides
(4-byte gradients in the state and in the gradient collectives).

The compiled traffic is read from --loom-report's per-phase figures
(executions per step x bytes per execution, keyed "<kind>[<axes>]"): a
collective over one axis counts on that axis; one over dp and tp together
(the gradients sequence parallelism leaves partial over tp) counts on dp.
"""
import json
import os
import subprocess
import sys

loom, loom_opt, config, work = sys.argv[1:5]
MODE = sys.argv[5] if len(sys.argv) > 5 else "fp32"
assert MODE in ("fp32", "bf16", "bf16-fp32-grads"), MODE
PRECISION = "fp32" if MODE == "fp32" else "bf16"
FP32_GRADS = MODE == "bf16-fp32-grads"
GRAD_FLAGS = ["--grad-precision", "fp32"] if FP32_GRADS else []
ELEMENT_BYTES = 2 if PRECISION == "bf16" else 4
GRAD_BYTES = 4 if FP32_GRADS else ELEMENT_BYTES
BATCH, SEQ = 8, 32
N_EMBD = json.load(open(config))["n_embd"]
N_POSITIONS = json.load(open(config))["n_positions"]

# (dp, tp, pp, micro-batches, schedule, virtual stages, recompute modes):
# 3D plans with 1F1B and interleaved 1F1B, with each recomputation, and
# unpipelined plans with one micro-batch (DDP's all-reduces stay in the
# backward, bucketed) and with several (whole gradients accumulated and
# reduced once per step in the last micro-batch: DDP all-reduces, ZeRO-1
# reduce-scatters in place; ZeRO-2/3 reduce-scatter every micro-batch), with
# and without tensor parallelism.
MESHES = [(2, 2, 2, 4, "1f1b", 1, ("none", "selective", "full")),
          (2, 2, 2, 4, "interleaved", 2, ("none",)),
          (4, 1, 2, 2, "gpipe", 1, ("none",)),
          (1, 4, 2, 4, "1f1b", 1, ("none",)),
          (2, 2, 1, 1, "1f1b", 1, ("none",)),
          (2, 2, 1, 4, "1f1b", 1, ("none",)),
          (4, 1, 1, 1, "1f1b", 1, ("none",)),
          (4, 1, 1, 2, "1f1b", 1, ("none",))]

# dp, by ZeRO stage, for pipelines. Left out of the plan, as compiler
# matters rather than the model's: the scalar all-reduces (loss, gradient
# norm), the SP layer-norm shards' rounding and, in a ZeRO-1 pipeline, the
# tensors whose optimizer state ZeRO-1 cannot split over dp (a
# column-parallel bias: its gradient is all-reduced, not reduce-scattered),
# about 1% of a stage of this small model.
DP_TOLERANCE = {0: 0.02, 1: 0.02, 2: 0.01, 3: 0.01}


def dp_bounds(mesh, zero, sp, plan):
    """The interval the compiled dp figure must fall in, around the plan's
    `plan` bytes, as (low, high). The plan counts every parameter once,
    reduced as DDP and the ZeRO paper reduce it; what the compiled step
    sends beyond that is the compiler's and named here (an upper bound, so
    that a compiler that stops sending it still passes)."""
    dp, tp, pp, micro = mesh[:4]
    if pp > 1:
        tolerance = DP_TOLERANCE[zero]
        return plan * (1 - tolerance), plan * (1 + tolerance)
    if zero == 0 and micro == 1:
        # DDP with one micro-batch all-reduces wpe's gradient before its pad
        # to the table: only the SEQ rows the step wrote (under SP this
        # rank's SEQ/tp, gathered over tp afterwards), where the plan counts
        # the table's N_POSITIONS. The rest, the tied wte's two
        # contributions summed before one all-reduce included, is the
        # plan's to the 4 bytes of the loss.
        rows = SEQ // tp if sp else SEQ
        unwritten = (N_POSITIONS - rows) * N_EMBD * GRAD_BYTES
        exact = plan - 2 * (dp - 1) / dp * unwritten
        return exact * (1 - 1e-4), exact * (1 + 1e-4)
    # Left out below the plan (0.5%): ZeRO-3's backward re-gathers only the
    # tensors it reads (not the biases, wte, wpe): up to 0.3% less.
    low = plan * (1 - 0.005)
    if sp and zero >= 2:
        # Sequence parallelism under ZeRO-2/3: since the tied wte's two
        # contributions are reduce-scattered as one sum, the compiled step
        # sends up to 0.55% less than the plan here (measured: -0.50% for
        # ZeRO-2, -0.53% for ZeRO-3); the plan's count of the partial
        # layer-norm gradients' reductions is the coarser one.
        low = plan * (1 - 0.0075)
    # ZeRO-1 reduce-scatters the matrices and wte once per step and
    # all-reduces wpe, the norms and biases: up to 0.7% more.
    high = plan * (1 + (0.01 if zero == 1 else 0.005))
    return low, high


# Relative tolerances per figure, and why they are not 0 (the plan models
# the collectives that scale with the model; what it leaves out is named).
TOLERANCE = {
    # Exact: tensor by tensor, as the compiler shards them.
    "state_fp32": 0.0,
    "state_bf16": 0.0,
    # Left out: the 4-byte gradient-norm all-reduce over tp.
    "tp": 1e-4,
    # dp: per ZeRO stage, below.
    "dp": None,
    # Left out: the loss and gradient-norm all-reduces (8 bytes).
    "pp": 1e-4,
}


def run(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


def strategy(mesh, zero, recompute):
    dp, tp, pp, micro, schedule, virtual, _ = mesh
    flags = ["--mesh", f"dp={dp},tp={tp},pp={pp}", "--zero", str(zero),
             "--microbatches", str(micro), "--recompute", recompute]
    if pp > 1:
        flags += ["--schedule", schedule]
    if virtual > 1:
        flags += ["--virtual-stages", str(virtual)]
    return flags


def compiled(mesh, zero, recompute, sp, tag):
    flags = ["--config", config, "--batch", str(BATCH), "--seq", str(SEQ),
             "--train", *strategy(mesh, zero, recompute),
             "--precision", PRECISION, *GRAD_FLAGS]
    if sp:
        flags.append("--sequence-parallel")
    ir = os.path.join(work, f"{tag}.mlir")
    run(loom, "compile", *flags, "--emit-ir", ir, "-o",
        os.path.join(work, f"{tag}.loom"))
    report = json.loads(run(loom_opt, "--loom-report=json=true", ir, "-o",
                            os.devnull))
    stages = []
    for st in report.get("pipeline_stages", [report]):
        axes = {"tp": 0, "dp": 0, "pp": 0}
        for phase in st["sent_bytes_by_phase"].values():
            for key, sent in phase["sent_bytes_per_execution"].items():
                names = key[key.index("[") + 1:-1].split(",")
                axis = "dp" if "dp" in names else names[0]
                axes[axis] += phase["executions_per_step"] * sent
        # In bf16 the state compiled is the bf16 state itself (fp32
        # masters, 2-byte params and grads), not the report's estimate.
        assert st["precision"] == PRECISION
        assert st["grad_precision"] == ("fp32" if PRECISION == "fp32" or
                                        FP32_GRADS else "bf16")
        stages.append({"state_fp32": st["model_state_bytes"],
                       "state_bf16": st["model_state_bytes"]
                       if PRECISION == "bf16"
                       else st["model_state_bytes_bf16_mixed"],
                       **axes})
    return stages


def planned(mesh, zero, recompute, sp, precision):
    gpus = mesh[0] * mesh[1] * mesh[2]
    flags = ["--config", config, "--gpus", str(gpus), "--gpu-mem-gb", "1e6",
             "--batch", str(BATCH), "--seq", str(SEQ),
             *strategy(mesh, zero, recompute), "--precision", precision,
             *(GRAD_FLAGS if precision == "bf16" else []), "--json"]
    if not sp:
        flags.append("--no-sequence-parallel")
    return json.loads(run(loom, "plan", *flags))


ok = True
print(f"{'plan':<34} {'stage':>5} {'figure':<11} {'loom plan':>12} "
      f"{'compiled':>12} {'diff':>9} {'tolerance':>9}")
cases = [(mesh, zero, recompute, sp)
         for mesh in MESHES
         for recompute in mesh[6]
         for zero in ((0, 1, 2, 3) if mesh[0] > 1 else (0,))
         if recompute == "none" or zero in (1, 3)
         for sp in ((False, True) if mesh[1] > 1 else (False,))]
for mesh, zero, recompute, sp in cases:
    dp, tp, pp, micro, schedule, virtual, _ = mesh
    name = (f"dp{dp} tp{tp} pp{pp} m{micro}"
            f"{' ' + schedule if pp > 1 else ''}"
            f"{f' v{virtual}' if virtual > 1 else ''} z{zero}"
            f"{'' if recompute == 'none' else ' ' + recompute}"
            f"{' sp' if sp else ''}")
    tag = name.replace(" ", "-")
    built = compiled(mesh, zero, recompute, sp, tag)
    fp32 = planned(mesh, zero, recompute, sp, "fp32")
    bf16 = planned(mesh, zero, recompute, sp, "bf16")
    # 1001 rows: padded to a multiple of 128 x tp (1024 at tp = 1, 2 and 4).
    padded = -(-1001 // (128 * tp)) * 128 * tp
    ok &= fp32["memory"]["vocab_rows_per_gpu"] == padded // tp
    ok &= len(built) == len(fp32["memory"]["stages"])
    # The traffic the compiled step is compared with: the plan in its
    # precision.
    traffic_plan = bf16 if PRECISION == "bf16" else fp32
    for i, (got32, got16) in enumerate(zip(fp32["memory"]["stages"],
                                           bf16["memory"]["stages"])):
        traffic = traffic_plan["memory"]["stages"][i][
            "traffic_bytes_per_step"]
        plan = {"state_fp32": got32["model_state_bytes"],
                "state_bf16": got16["model_state_bytes"],
                "tp": traffic["tp"], "dp": traffic["dp"],
                "pp": traffic["pp"]}
        # Compiled in bf16, the step holds no fp32 state to compare.
        figures = ("state_bf16", "tp", "dp", "pp") if PRECISION == "bf16" \
            else ("state_fp32", "state_bf16", "tp", "dp", "pp")
        for figure in figures:
            want, got = built[i][figure], plan[figure]
            diff = (got - want) / want if want else float(got != want)
            if figure == "dp":
                # Compiled within [low, high] <=> plan within this range
                # of the compiled figure.
                low, high = dp_bounds(mesh, zero, sp, got)
                good = low <= want <= high
                scale = 100 / max(want, 1)
                bounds = (f"{scale * (got - high):+.2f}.."
                          f"{scale * (got - low):+.2f}%")
            else:
                tolerance = TOLERANCE[figure]
                good = abs(diff) <= tolerance
                bounds = f"{100 * tolerance:.2f}%"
            ok &= good
            print(f"{name:<34} {i:>5} {figure:<11} {got:>12} {want:>12} "
                  f"{100 * diff:>8.3f}% {bounds:>9}"
                  f"{'' if good else '  OUTSIDE'}")
print("loom plan agrees with loom compile" if ok
      else "LOOM PLAN DISAGREES WITH LOOM COMPILE")
sys.exit(0 if ok else 1)
